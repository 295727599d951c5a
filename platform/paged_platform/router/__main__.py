from paged_platform.router.cli import main

main()
