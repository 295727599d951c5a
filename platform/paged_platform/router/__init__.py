"""``paged-router``: an OpenAI-compatible router in front of one ModelDeployment's engine replicas.

Layers, each a module with one job:

* ``prompt`` (pure): the text a request is routed on and its chained chunk hashes;
* ``replica`` (plain state): what the router knows of each replica (readiness, in-flight, scraped load);
* ``policies/`` (pure functions over that state): which replica takes a request;
* ``queue``: the bounded per-model wait for a replica with room;
* ``pool``: the replicas, their probes and the leases that count in-flight requests;
* ``discovery``: endpoints from a static list or from the EndpointSlices of the engines' Service;
* ``proxy``: the upstream call with retries before the first byte, relayed byte for byte;
* ``app`` and ``cli``: the HTTP front and the console script.
"""
