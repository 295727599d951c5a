"""Leader election on a Lease: the rules (``lease``, pure) and the loop that acquires, renews and releases it
(``leader``). Only the leader runs the handlers.
"""
