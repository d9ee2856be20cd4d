"""The learning-rate schedules in plain Python float64 arithmetic.

Angel's four decays are emulated as the stateful objects Angel has (a counter
advanced by ``next()``), so the tests can replay Angel's call sequence; the
optax/torch family are closed-form functions of the step ``t``. Each is the
formula of docs/semantics.md section 4 written the obvious way, slow and
independent of fastopt.schedules.
"""
from __future__ import annotations

import math

# ----------------------------------------------------------- Angel's decays

class AngelStandard:
    """Angel's StandardDecay: current += 1, then eta / sqrt(1 + alpha * current)."""

    def __init__(self, eta, alpha, interval=100):
        self.eta, self.alpha, self.interval, self.current = eta, alpha, interval, 0

    def next(self):
        self.current += 1
        return self.eta / math.sqrt(1.0 + self.alpha * self.current)

    def is_interval_boundary(self):
        return self.current % self.interval == 0


class AngelCorrection:
    """Angel's CorrectionDecay with the counter started at 1 (Angel's starts at 0)."""

    def __init__(self, eta, alpha, beta, interval=100, start=1):
        self.eta, self.alpha, self.beta, self.interval = eta, alpha, beta, interval
        self.current = start
        self.calls = 0

    def next(self):
        denominator = 1 - math.pow(self.beta, self.current)
        if denominator == 0:  # Angel (Scala doubles): (1 - beta) / 0 = +inf
            value = math.inf
        else:
            value = (self.eta / math.sqrt(1 + self.alpha * self.current)
                     * (1 - self.beta) / denominator)
        self.current += 1
        self.calls += 1
        return value

    def is_interval_boundary(self):
        return self.calls % self.interval == 0


class AngelWarmRestarts:
    """Angel's WarmRestarts, including the cumulative division of eta_max."""

    def __init__(self, eta_max, eta_min, alpha, interval=100):
        self.eta_max, self.eta_min, self.alpha = eta_max, eta_min, alpha
        self.interval, self.current, self.restarts = interval, 0, 0

    def next(self):
        self.current += 1
        value = self.eta_min + 0.5 * (self.eta_max - self.eta_min) * (
            1 + math.cos(self.current / self.interval * math.pi))
        if self.current == self.interval:
            self.current = 0
            self.interval *= 2
            self.restarts += 1
            self.eta_max = self.eta_max / math.sqrt(1.0 + self.restarts * self.alpha)
        return value

    def is_interval_boundary(self):
        return self.current == 0

    def skip(self, calls):
        """Make ``calls`` next() calls; calls whose value is unused and that do not
        end a cycle only advance the counter, so this takes O(cycles) time."""
        while calls > 0:
            room = self.interval - self.current
            if calls < room:
                self.current += calls
                return
            self.current = self.interval - 1
            self.next()
            calls -= room


class AngelConstant:
    def __init__(self, eta):
        self.eta = eta

    def next(self):
        return self.eta

    def is_interval_boundary(self):
        return False


# ------------------------------------------------- the optax/torch family

def inverse_time(init, rate, steps, staircase, t):
    p = t // steps if staircase else t / steps
    return init / (1 + rate * p)


def exponential(init, steps, rate, begin, staircase, end, t):
    count = t - begin
    p = math.floor(count / steps) if staircase else count / steps
    try:
        value = init if count <= 0 else init * rate**p
    except OverflowError:
        value = math.inf
    if end is not None:
        value = max(value, end) if rate < 1 else min(value, end)
    return value


def polynomial(init, end, power, steps, begin, t):
    count = min(max(t - begin, 0), steps)
    return (init - end) * (1 - count / steps) ** power + end


def cosine(init, steps, alpha, exponent, t):
    t = min(t, steps)
    return init * ((1 - alpha) * (0.5 * (1 + math.cos(math.pi * t / steps))) ** exponent + alpha)


def warmup_cosine(init, peak, warmup, steps, end, exponent, t):
    if t < warmup:
        return init + (peak - init) * t / warmup
    alpha = end / peak if peak else 0.0
    return cosine(peak, steps - warmup, alpha, exponent, t - warmup)


def piecewise(init, table, t):
    return init * math.prod(scale for boundary, scale in table.items() if t >= boundary)
