"""The one geometric mean (ablate._numbers.geomean): exp(mean(log v)), None where it has no meaning."""
import math

import pytest

from ablate._numbers import geomean


def test_the_geometric_mean_is_exp_of_the_mean_log():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean(iter([1.5])) == pytest.approx(1.5)


def test_no_values_or_one_not_positive_has_none():
    assert geomean([]) is None
    assert geomean([1.0, 0.0]) is None and geomean([1.0, -2.0]) is None and geomean([1.0, None]) is None
    assert geomean([1.0, math.nan]) is None


def test_it_neither_overflows_nor_underflows_where_a_product_would():
    assert geomean([1e300] * 4) == pytest.approx(1e300)
    assert geomean([1e-300] * 4) == pytest.approx(1e-300)
