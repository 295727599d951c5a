"""Pure policy: the fleet view from engine samples, the autoscaler, the budget tuner, the arbiter between them,
scale to zero, and ``controller.decide`` that runs them for one decision. No I/O: every input is a value, every
answer a plan, so each rule is unit-tested without a cluster.
"""
