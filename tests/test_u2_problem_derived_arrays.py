"""Problem's derived index arrays are made read-only in place, no longer copied again (u2): same
dtype, shape and values, still read-only and owning their data (nothing else can write them)."""

from __future__ import annotations

import numpy as np
import pytest

from iro_fed.model import Problem
from iro_fed.testing import random_problem

DERIVED = {"node_domain": np.int32, "node_gpu_model": np.int32, "wl_region": np.int32, "wl_gpu_total": np.int64,
           "domain_carbon": np.float64, "domain_pue": np.float64, "domain_unit_price": np.float64}


@pytest.mark.parametrize("seed", range(3))
def test_derived_arrays_are_read_only_owned_and_right(seed: int) -> None:
    p: Problem = random_problem(seed, nodes=7, pods=9)
    shapes = {"node_domain": (p.num_nodes,), "node_gpu_model": (p.num_nodes,), "wl_region": (p.num_workloads,),
              "wl_gpu_total": (p.num_workloads,), "domain_carbon": (len(p.domains),), "domain_pue": (len(p.domains),),
              "domain_unit_price": (len(p.domains), len(p.util_resources))}
    for name, dtype in DERIVED.items():
        arr = getattr(p, name)
        assert arr.dtype == dtype and arr.shape == shapes[name], name
        assert not arr.flags.writeable and arr.flags.owndata, name
        with pytest.raises(ValueError):
            arr[...] = 0
    np.testing.assert_array_equal(p.node_domain, [p.domain_index[n.domain] for n in p.nodes])
    np.testing.assert_array_equal(p.wl_region, [p.region_index.get(w.user_region, -1) for w in p.workloads])
    want = [0 if c == 0 else (c * 1000 if c > 1 else m) for c, m in zip(p.wl_gpu_count, p.wl_gpu_milli, strict=True)]
    np.testing.assert_array_equal(p.wl_gpu_total, want)
    np.testing.assert_array_equal(p.domain_carbon, [d.carbon_intensity for d in p.domains])


def test_a_problem_without_workloads_has_empty_derived_arrays() -> None:
    p = random_problem(0, nodes=3, pods=0)
    assert p.wl_region.shape == (0,) and p.wl_region.dtype == np.int32
    assert p.wl_gpu_total.shape == (0,) and p.wl_gpu_total.dtype == np.int64
