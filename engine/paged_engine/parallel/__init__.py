"""Parallelism over several devices: how a model is cut between ranks (``layout``, torch-free) and the
collectives the cut model runs (``collectives``)."""
