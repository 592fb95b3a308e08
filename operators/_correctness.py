"""The one correctness rule: a kernel's error must lie within the envelope that the reference
computed in the contract's dtype and the production libraries show on the same inputs.

This module is the rule's public face; the rule lives in three modules, one job each:

    _error_stats   one output's error statistics against the float64 reference (scale, rms, max,
                   frac, nonfinite), in chunks of bounded memory
    _envelope      what one shape allows (floor, slack, ceiling; operator rules such as top-k's)
                   and the judgement of one set of outputs against it
    _calibration   the float64 reference, and the envelope calibrated from the reference in the
                   contract dtype and the libraries (leave one out, contract rules)

API (the judge, ``Operator.verify``, the benchmarks and the tests all use these):

    reference_outputs(op, inputs) -> tuple                     the float64 reference, kept in float32
    error_stats(out, ref, tol) -> Stats                        one tensor's statistics
    envelope(reference_stats, library_stats, tol, dtypes, rule) -> Envelope
    judge_output(out, ref, env, inputs=()) -> Judgement(ok, margin, message, stats)
    calibrate(op, inputs, ref=None, implementations={}, dtype=None)
        -> Calibration(envelope, verdicts {name: Verdict(status, margin, message, stats, rule)}, reference stats,
           seconds {name: wall seconds})

``margin`` is the kernel's worst statistic over its bound (<= 1 passes; inf for NaN, a wrong
structure or an operator rule's violation). ``Envelope.as_dict()`` / ``from_dict`` make the
envelope cacheable as JSON, under the rule's ``EDITION``.
"""
from ablate.operators._calibration import (Calibration, ContractRule, Verdict, breaks, calibrate, contract_dtype,
                                           reference_outputs, tolerance_of, upcast)
from ablate.operators._envelope import (EDITION, RULES, SLACK, TOLERANCE, UNIT, Bounds, Envelope, Judgement, Rule,
                                        as_outputs, ceiling, envelope, floor, judge_output, margin, structure_problem)
from ablate.operators._error_stats import CHUNK, Stats, error_stats, worst_element

__all__ = ["CHUNK", "EDITION", "RULES", "SLACK", "TOLERANCE", "UNIT", "Bounds", "Calibration", "ContractRule",
           "Envelope", "Judgement", "Rule", "Stats", "Verdict", "as_outputs", "breaks", "calibrate", "ceiling",
           "contract_dtype", "envelope", "error_stats", "floor", "judge_output", "margin", "reference_outputs",
           "structure_problem", "tolerance_of", "upcast", "worst_element"]
