// Command pause is the real node's pod sandbox process: it holds the pod's namespaces, sleeping until told to stop.
// registry.k8s.io's pause image cannot be pulled here, so the test bed builds this one (static, no libc) instead.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
