"""``qubo``: placement as a QUBO (a dimod binary quadratic model) sampled by simulated annealing.

**Variables.** For a batch of pods against a cluster state: ``x[w, n]`` for each of the pod's
candidate nodes (the ``max_candidates`` feasible nodes with the best marginal gain of R, plus
the node the ``greedy-objective`` reference placement of the batch gives it, so the model stays
small and every pod has a node where it surely fits), an explicit ``u[w]`` ("unplaced") per
pod, and ``o[n]`` ("on") per candidate node that is empty (powered off).

**Energy = -R + penalties** (all in units of R; the sampler minimizes):

* objective, linear biases: ``-(latency + utilization - dynamic carbon)`` per ``x[w, n]``
  (the objective module's per-pod terms), ``+w5 / W`` per ``u[w]`` (the unplaced penalty),
  ``+(w3 cost + w4 idle carbon)`` per ``o[n]``. Utilization is a ratio over the nodes on; it
  enters as its tangent at the ``greedy-objective`` placement of the batch (a reward per placed
  unit of demand at that denominator, a charge per unit of capacity an ``o[n]`` powers on), the
  same surrogate as the cpsat solver's;
* one-hot: ``5 P (sum_n x[w, n] + u[w] - 1)^2`` per pod (:data:`ONEHOT_WEIGHT` = 5: a pod on
  two nodes must cost more than any capacity term can pay for it);
* power-on: ``P x[w, n] (1 - o[n])`` (a pod on an empty node turns it on);
* capacity, per node and resource where the candidates could overflow it (cpu, memory, other
  additive resources; GPU as the node's total free milli for share pods plus whole cards, and
  fully free cards for k-GPU pods; the card-level packing is checked when decoding). The room
  ``F`` of an additive resource is what is free plus the filters' tolerance
  (:func:`~iro_fed.feasibility.fit_tolerance`), so the QUBO takes the pods the filters and
  check_placement take. The ``capacity`` setting chooses

  - ``"unbalanced"`` (default), unbalanced penalization (J. A. Montañez-Barrera, D. Willsch,
    A. Maldonado-Romo, K. Michielsen, "Unbalanced penalization: a new approach to encode
    inequality constraints of combinatorial problems for quantum optimization algorithms",
    arXiv:2211.13914, 2022; Quantum Sci. Technol. 9, 025022, 2024): ``P (-l1 h + l2 h^2)`` with
    ``h = (F - load) / unit`` the room left in units of the mean candidate demand ``unit``, no
    extra variables. We use ``(l1, l2) = (1, 1)`` (:data:`UNBALANCED_L1`, :data:`UNBALANCED_L2`):
    the penalty is lowest at half a pod of room, one pod too many costs about ``2.25 P``. The
    paper's ``(0.96, 0.0371)`` puts the minimum at 13 pods of room, which here prices every
    placement. The calibration raises ``l1`` with ``P`` (below);
  - ``"slack"``: ``P ((sum_w a_w x[w, n] + sum_b c_b s_b - F) / unit)^2`` with binary slack bits
    ``s_b`` of weights ``c_b = g 2^b`` (``g`` the greatest common divisor of the demands and the
    free amount, the largest bit stretched to ``F``; coarsened to at most :data:`MAX_SLACK_BITS` bits). Every placement that
    fits has a zero penalty (exactly when ``F - load`` is a multiple of ``g``).

  Why unbalanced by default: a node's free capacity spans many pods, so a quadratic in the
  room ``h`` cannot be flat over ``[0, F / unit]`` and steep just below 0. Centred at half a
  pod of room it pulls every node towards full, which agrees with R (utilization and the
  unplaced penalty reward packing) and leaves overflows to the repair; slack bits are unbiased
  but simulated annealing rarely sets them exactly (a pod moves only if several bits flip
  with it). Measured on the benchmark's 100 x 20 problem (seeds 0 and 1, after repair): R
  -0.68 / -0.87 with ``(1, 1)``, -0.93 / -1.11 with the paper's values, -0.81 / -0.88 with
  slack bits. Either way, on problems of 100 pods or more few raw reads are feasible (0 to 40 %
  at the last calibration step): ``info`` reports the fraction, and the placement returned is
  always feasible after the repair.

**Penalty calibration.** ``P = alpha * scale``, ``scale`` the largest objective bias of the
batch. ``alpha`` starts at ``penalty_start`` and grows geometrically (``penalty_growth``)
until the lowest-energy read is feasible (or ``max_penalty_steps``); every read of every step
is decoded and repaired, and the best by the *true* objective is kept (too low a penalty gives
no feasible read, too high a penalty drowns the objective: the good band is narrow).
Unbalanced penalties have a fixed shape, so a larger ``P`` alone scales their pull towards
full nodes and their charge for overflow together; step k therefore also uses ``l1 = 1 + 2k``
(:data:`UNBALANCED_SHIFT_GROWTH`), moving the penalty's minimum to more room, which is what
makes reads feasible. The best repaired read usually comes from the first steps (100 x 20 seeds
0-7: step 0 or 1 but seed 3's step 2; 500 x 100 has later ones), so the calibration also stops once ``penalty_patience`` steps
in a row found no better repaired read. When the sampler's answer is the result (no refinement,
no polish) the count starts at the first step with a feasible read: before it, a higher penalty is
what makes reads feasible (bank-three-zone, seeds 0-2: counted from the start, it stopped after 3
steps with no read feasible; now steps 5-6 reach 6-62 % feasible reads and a better R on 2 of 3
seeds). So it does with refinement or polish where that is cheap
(:data:`FEASIBLE_CALIBRATION_SHARE`, ``info["calibration"]``; ``max_penalty_steps`` 12, up from 6:
on the bank example, seeds 0-2, and the benchmark's 20 x 5, 50 x 10 and 80 x 16 problems, seeds
0-3, the lowest-energy read became feasible on 15 of 15 instead of 1, at steps 3-9, R the same on
13, +0.014 and -0.0001 on the others, in about the same time). Where it is dear it starts at
once: the refinement and polish repair and improve the start anyway, and the longer calibration
took 2.6x the time at 100 x 20 for the same R; there a step with no
feasible read whose best repaired read is worse than the step before's also ends it (a higher
penalty that made no read feasible only drowned the objective further: on the benchmark's 100 x 20
problems, seeds 0-7, the step after it was never the best: the same placements from 20 sampling
calls instead of 27, 15 % less CPU; at 500 x 100, seeds 0-2, 32 sampling calls instead of 55, 28 %
less CPU, R -0.688 / -0.676 / -0.715 against -0.708 / -0.652 / -0.712, the refinement taking
another path; ``penalty_patience=0`` turns this off too). ``max_penalty_steps`` caps the steps
either way. ``penalty`` fixes ``alpha`` (and ``l1 = 1``) instead.

**Decode and repair.** A read is *feasible* when every pod has exactly one of its variables set
and the placed pods fit (additive resources, and GPU cards packed best-fit decreasing, checked
with :func:`iro_fed.feasibility.check_placement`). Repair: a pod set on several nodes keeps the
one with the best objective bias, pods are put on a :class:`~iro_fed.model.ClusterState` best
bias first and dropped where their node is already full (where the default card choice, pod by
pod, would strand a GPU pod on a node whose GPU pods pack, they take the cards of that packing,
so a feasible read keeps every pod), then unplaced pods are placed greedily by the objective's
:func:`~iro_fed.objective.marginal` (when it is positive).

**Polish** (``polish``, on by default): after the refinement, the local search of
:func:`solvers.local_search.improve` scored with the true R: single-pod moves, node drains and pairwise
swaps between full nodes, which the refinement's two-node sub-QUBOs should find but rarely do
(the capacity penalties' slope, below). It is a hybrid, as qbsolv and D-Wave's hybrid solvers
are: ``polish=false`` gives the sampler's refined result alone, and ``info["polish_moves"]``
says what the polish changed. On the benchmark's 100 x 20 problems (seeds 0-2) 150 refinement
steps (the default) plus the polish give R -0.633 / -0.725 / -0.589 in 1.6-1.7 s (-0.630 /
-0.725 / -0.586 before the repair kept the card packing of feasible reads: another path of the
refinement, not a loss of the repair), against
-0.648 / -0.733 / -0.602 in about 1.9 s for the former default of 200 steps alone (2.2-3.0 % of
|R| below CP-SAT instead of 4.4-5.9 %); 200 steps plus the polish are within 0.004 of 150 and
take 1.85-1.98 s; 100 steps lose 0.04 at 20 x 5 (seed 0). The polish's swap screen (resources
and static filters, vectorized, before any state change) keeps it at about 0.1 s at 100 x 20.

**Large problems.** Pods are solved in batches of ``batch_size`` against the running cluster
state (each batch's placement is committed before the next), so 500 pods x 100 nodes is five
QUBOs of about 1,000 variables.

**Time.** ``time_limit_s`` (or the caller's deadline, if sooner) is planned first
(``info["plan"]``, its figures in ``info["plan_estimate_s"]``): when sampling every batch with its
calibration (a-priori, from the per-pod costs below, at most ``penalty_patience + 1`` steps) and a
reserve for the refinement (:data:`REFINE_STEP_S` per step, at most :data:`REFINE_RESERVE_STEPS`)
do not fit in it, the plan is ``"greedy-first"``: every batch is placed greedily and the time goes
to the refinement and the polish. Without it the first batch's calibration took a short budget
and the others were placed greedily with no refinement left (500 x 100, seeds 0-2, R at 0.5 / 1 /
2 s: -1.18 / -1.24 / -1.22, -1.40 / -1.40 / -1.31, -1.68 / -1.68 / -1.58, worse than at 0.2 s;
greedy-first: -0.79 / -0.78 / -0.78, -0.89 / -0.75 / -0.74, -1.05 / -0.78 / -0.77). With the
defaults the plan is greedy-first below about 5.7 s at 500 x 100 and 2.3 s at 100 x 20 (a batch's
a-priori cost is 1.5-3x what a loaded 2-core machine measures, so the plan takes half of it,
:data:`PLAN_PESSIMISM`; 2,000 pods are sampled in the default 30 s; where sampling would have finished,
100 x 20 at 2-3 s and problems of 14-50 pods at 0.3-1 s, greedy-first is better on some seeds and
worse on others, by up to 0.16 of R at 50 x 10). With the time, or with ``refine_steps=0`` (nothing to give the time to), the plan is ``"sample"``: a batch
is sampled only when the time left covers an estimate of its least work (model build, one sampling
call, one read decoded and repaired: :data:`BATCH_BUILD_S_PER_POD`, :data:`SAMPLE_S_PER_POD_SWEEP`
and :data:`DECODE_S_PER_POD` per pod before the solve has measured a batch, then the last sampled
batch's own time per pod); otherwise it is placed greedily by the objective's marginal gain
(``info["batches"][i]["skipped"]``, with the estimate; ``info["batches_sampled"]`` and
``info["batches_greedy"]`` count both kinds). Past the deadline a step decodes no further read
(the lowest-energy one always is); a higher penalty is tried only while the time left covers the
batch's last sampling call, and a refinement step only while it covers the step's estimate (per
pod: the constants above for :data:`REFINE_READS` reads and :data:`REFINE_DECODED` decoded, then
the last step's own time), else the refinement ends (``info["refine"]["planned_out"]``: the step,
its pods, the estimate and the time left); every estimate counts a tabu read as ``1 +
tabu_restarts`` reads (at most :data:`MAX_TABU_RESTARTS`). The polish stops at the deadline.
(Before: time_limit_s=0.01 on 500 x 100 sampled the first batch whole, 0.78 s; at time_limit_s=1
on 20 x 5, num_sweeps=300,000 ran one refinement step for 5 s, and tabu_restarts=1,000,000 ran past
60 s.) What can still end late: a sampling call whose estimate was too low (one batch's model
build, sampling call and first read; one refinement step), and the greedy placement of the batches
left.

**The wall clock and the seed.** The seed fixes the placement unless the wall clock stopped a
phase first, and ``info["wall_clock_cut"]`` names those phases: ``"batches"`` (in the ``sample``
plan, a batch placed greedily for the time, a higher penalty not tried or reads not decoded),
``"refine"`` (steps not run, planned out, or a step's reads not decoded), ``"polish"`` (it met
the deadline), ``"starts"`` and ``"widen"`` (below); per batch, ``clock_cut``, and ``info["refine"]["clock_cut"]``. An empty list: the
placement is the seed's, the same on any machine. The plan is a-priori (the settings and the
budget, not the machine's speed): greedy-first batches are no cut. (The 100 x 20 benchmark at
time_limit_s=3 on a loaded 2-core machine, seed 0 three times: R -0.625, -0.657, -0.625 after
150, 115 and 150 refinement steps, the middle run's refinement cut by the clock.)

**Decomposition refinement** (``refine_steps``; after M. Booth, S. P. Reinhardt, A. Roy,
"Partitioning Optimization Problems for Hybrid Classical/Quantum Execution", D-Wave technical
report 14-1006A-A, 2017, the qbsolv method: solve sub-QUBOs with the rest of the solution
fixed). A whole-batch read moves a pod only by flipping it off one node and onto another, and
between the two every penalty pushes back, so the batch QUBO settles where swaps and chains of
moves would still gain. Each refinement step takes the pods off ``refine_nodes`` nodes (every
other step, a node where a pod left unplaced would fit if it were empty; else a node with pods,
plus random nodes), adds the unplaced pods that now fit there, and builds the same QUBO for
those pods against the rest of the placement (every node a candidate again: a freed pod may go
anywhere it fits). The sub-QUBO has tens of variables: it is sampled once at the first
penalty (:data:`REFINE_READS` reads; its lowest-energy reads are nearly always feasible), its
:data:`REFINE_DECODED` lowest-energy distinct reads are repaired, and the best is kept when
the true R improves; a neighbourhood that failed is not drawn again until a step succeeds (while
another is left), and the refinement ends after :data:`REFINE_MAX_STALL` steps in a row failed.
Measured on the benchmark's 100 x 20 problem (seed 0; CP-SAT in 10 s: -0.620): without
refinement -0.679, 50 steps -0.658, 200 steps -0.648 in 1.65 s (without the polish); over six problem
seeds the distance below CP-SAT (20 s) falls from 35 % of |R| on average (10-91 %) to 6.2 %
(4.2-9.8 %). On 500 x 100 (CP-SAT -0.728, 5 unplaced): -1.033 (18 unplaced) before, -0.730
(4 unplaced) after. Why not closer: for most sub-QUBOs an exact CP-SAT solve of the same pods
finds a better placement (34 of 40 steps on one problem), and the sampler is not the cause
(more reads or sweeps, tabu search or other penalties do not change that): the capacity
penalty's slope, about ``P`` per pod and ``P`` at least the unplaced penalty ``w5 / W``, is
100 times the objective's differences between nodes, so the ground state of the QUBO packs
nodes rather than choosing the best ones.

**Starts** (``starts``, by default ``iro-frag,best-fit``; only with the refinement). The
refinement moves the pods of a few nodes at a time, so where it ends depends on where it
starts, and at 500 x 100 it stalls within about 2 s of the default 30. With the time left after
the batches' refinement and polish, each start solver (an online one) places the whole problem,
and the same refinement and polish run from its placement; the best by R is returned, the
batches' on a tie (``info["starts"]``: ``chosen``, the batches' R, and per start its R before and
after, the refinement's report, the polish's moves and seconds). iro-frag packs GPU shares so
that whole cards stay free, which a 2-node sub-QUBO cannot undo once shares are spread (the same
reason it is cpsat's default hint). Measured on the benchmark's problems (2 cores, seed 0 of the
solver; R before -> after): 500 x 100 with the default 30 s, problem seeds 0-4: -0.790 / -0.706 /
-0.748 / -0.696 / -0.706 -> -0.760 / -0.673 / -0.721 / -0.672 / -0.676 (iro-frag's start four
times, best-fit's once; 2.0-2.3 s -> 3.7-4.4 s); 100 x 20 in the benchmark's 2 s, seeds 0-7:
three gain (+0.013, +0.004, +0.002), five keep the batches' result; 20 x 5, seeds 0-3: +0.017,
+0.001, +0.008, 0; 1,000 x 500, seeds 0-1: no gain (3.3 s more). A start the clock stops before
it has placed every pod is left out, and ``wall_clock_cut`` names ``"starts"`` wherever the clock
stopped a start, its refinement or its polish. Each start may run until an equal share of the
time then left among the starts still to run, and the widening has what they leave (at 100 x 20
in 1 s iro-frag's refinement had taken it all; a share kept for the widening too cost two of eight
100 x 20 problems in 2 s more than the widening gained). The start solvers are built at the first solve and kept (``preload`` builds them and loads
what they load, as dqn's checkpoint, before any solve).

**Widening** (``widen_nodes``, by default 5; only with the refinement). Then the best
placement is refined again in rounds with sub-QUBOs over 3, 4, ... ``widen_nodes`` nodes (from
``refine_nodes + 1``; at most the node count, and a round runs at most as many steps as there are
neighbourhoods of its size), each followed by the polish, while time is left: a pod that needs
room made on three or four nodes at once is out of reach of two-node steps. Measured (the
benchmark's problems, solver seed 0, with the starts; R before -> after): 500 x 100 in the
default 30 s, problem seeds 0-4: -0.760 / -0.673 / -0.721 / -0.672 / -0.676 -> -0.744 / -0.666 /
-0.712 / -0.666 / -0.669 (3.8-4.7 s -> 7.2-8.7 s); 100 x 20 in 2 s, seeds 0-7: three gain (+0.005
to +0.006), the others keep their R, and the clock now stops every run there (``wall_clock_cut``
``["widen"]``; the starts and the widening stop :data:`FILL_RESERVE_SHARE` of the budget before
its end, so the answer is out within it); 20 x 5, seeds 0-3: one gains (+0.004); 1,000 x 500, seeds 0-1: no gain, 2 s more.
A round that gains nothing (and ran to its end) ends the widening unless a pod left out fits no
node now but one of the cluster as it was before the problem's pods (a larger round may make room
for it: a random 30 x 10 problem places its last pod only over 4 nodes): the larger rounds are skipped
(``skipped``: "no gain over N nodes"). On the problems above and the bank example (seeds 0-2),
20 x 5 and 50 x 10 (seeds 0-3), no round after one without gain ever gained; with the skip those
11 small runs take 13.8-14.9 s instead of 19.5 s for the same R, 500 x 100 (seeds 0-2) keeps its
R and rounds (each gains), 100 x 20 in 2 s (seeds 0-7, runs the clock ends) -6.3326 summed before,
-6.3295 to -6.3375 in three runs after.
``info["widen"]``: per round its size, the refinement's report, the polish's moves and the gain.

``info`` reports, per batch (``batches``): the best energy, the feasible-read fraction (of the
reads decoded: ``reads`` sampled, ``checked`` decoded, per step), the penalty used, the repairs
and the calibration steps (a batch with no candidate pair samples nothing: ``reads`` 0 and
energy, fraction and penalty None); in total, over the sampled batches: the last one's energy
(each batch is its own BQM), the mean feasible-read fraction, the penalties, the repairs (None,
None, [] and 0 when no batch was sampled); ``refine``: steps, accepted steps, the gain of R,
``clock_cut`` and ``planned_out`` (None, or the step the time left had no room for);
``polish_moves``: the polish after it. These describe the batches' path, which a start may
replace and the widening improve: ``starts`` (``chosen`` says whose placement went on) and
``widen`` (above) say what happened after; ``wall_clock_cut`` (above).
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from iro_fed.feasibility import (
    candidate_matrix,
    check_placement,
    fit_tolerance,
    pod_groups,
    static_filter,
)
from iro_fed.interrupt import run_interruptibly
from iro_fed.model import GPU_MILLI, ClusterState, Problem
from iro_fed.objective import coefficients, evaluate, marginal
from iro_fed.placement import Placement
from solvers.base import (
    SEED,
    InvalidSettingError,
    OnlineSolver,
    Param,
    Solver,
    SolverProperties,
    pass_typical_tasks,
    preload_each,
    solver_list,
)
from solvers.local_search import POLISH_TOL, improve, is_share, pack_gpu, unplaced_reasons

if TYPE_CHECKING:
    from iro_fed.fragmentation import TypicalTasks

#: Unbalanced-penalization coefficients (Montañez-Barrera et al. 2022).
UNBALANCED_L1 = 1.0
UNBALANCED_L2 = 1.0
#: Calibration step k uses l1 = UNBALANCED_L1 * (1 + UNBALANCED_SHIFT_GROWTH * k).
UNBALANCED_SHIFT_GROWTH = 2.0
#: Weight of the one-hot penalty relative to the capacity penalties.
ONEHOT_WEIGHT = 5.0
#: Refinement sub-QUBOs: reads per sampling call, how many of the lowest-energy distinct reads
#: are decoded, repaired and scored, and the seed stream of the refinement (apart from batches').
REFINE_READS = 8
REFINE_DECODED = 4
REFINE_STREAM = 1_000_000
#: Time kept after the starts and the widening (which run while time is left) for assembling the
#: answer: a share of the budget, at least MIN_FILL_RESERVE_S (100 x 20 in 2 s ended 0.5 ms late).
FILL_RESERVE_SHARE = 0.02
MIN_FILL_RESERVE_S = 0.02
#: Seed streams of the widening's rounds: WIDEN_STREAM + nodes * WIDEN_STREAM_STEP.
WIDEN_STREAM = 2_000_000
WIDEN_STREAM_STEP = 100_000
#: Draws per refinement step to find a neighbourhood not tried since the last accepted step.
REFINE_RETRIES = 8
#: The refinement stops after this many steps in a row without a gain (six 100 x 20 problems:
#: the same placements as without the stop but one, 5.6 % -> 6.1 % of |R| below CP-SAT there;
#: the 34-pod bank example: 1.35 s -> 0.71 s). Repeats count: on small clusters every
#: neighbourhood has been tried and steps repeat them with another seed; counted only when new,
#: the repeats were 53 % of the steps on 8 small problems and gave 6 of 157 gains, and counting
#: them gave the same R on 32 problems (4-20 nodes, the benchmark's 20 x 5 to 100 x 20 and the
#: bank example, default settings) with 20-55 % less time on those of up to 10 nodes.
REFINE_MAX_STALL = 60
#: Largest penalty multiplier alpha (``penalty``, ``penalty_start``, the calibration's steps): at
#: 1e6 the penalties already drown R's biases a millionfold; far above, the biases overflowed
#: (``penalty=1e307``: an infinite bias, a zero temperature and a traceback).
MAX_PENALTY_ALPHA = 1e6
#: Sampling calls of more than this much work (reads x sweeps x variables, tabu restarts counted)
#: run where Ctrl-C stops them (:func:`iro_fed.interrupt.run_interruptibly`): about 30 ms of
#: annealing on one core. A refinement call (8 reads, 300 sweeps, tens of variables) stays below.
INTERRUPTIBLE_WORK = 1_000_000
#: Most slack bits per capacity constraint.
MAX_SLACK_BITS = 12
#: The least work of a batch (model build, one sampling call, one read decoded and repaired), per
#: pod, before a batch of this solve has measured it: build, simulated annealing per read and
#: sweep, decoding and repairing one read. Measured on a 100-pod batch of the benchmark's 500 x 100
#: problem (843 variables, 23,076 interactions; 2 cores at load 2-4): 0.125 s, 0.38 s for 16 reads
#: of 300 sweeps, 0.0125 s per read. A batch is placed greedily when less time than this is left
#: (time_limit_s=0.01 there sampled the first batch whole: 0.78 s).
BATCH_BUILD_S_PER_POD = 1.0e-3
SAMPLE_S_PER_POD_SWEEP = 7.5e-7
DECODE_S_PER_POD = 1.0e-4
#: The plan (module docstring, Time): a refinement step's time reserved before the batches are
#: sampled, and at most this many steps of it. A refinement sub-QUBO of the 500 x 100 problem
#: (13 pods, 8 reads, 4 decoded) took 5-7 ms at load 2-4; 150 steps are the default's.
REFINE_STEP_S = 0.01
REFINE_RESERVE_STEPS = 150
#: The a-priori sampling estimate (the per-pod constants above, with the penalty calibration's
#: steps) ran 1.5-3x what batches measured (a 100-pod batch: 1.66 s estimated, 0.55-1.26 s
#: measured at load 2-4): the plan takes half of it. With the whole estimate the default 30 s
#: placed 2,000 pods greedily (estimate 33.2 s) that the old loop sampled in time (R -1.61
#: instead of -1.45 on 400 nodes).
PLAN_PESSIMISM = 2.0
#: With a refinement or the polish after it, the calibration still raises the penalty until a read
#: is feasible (the patience counted from the first feasible read, as without them) where that is
#: cheap: every batch sampled with all ``max_penalty_steps`` steps estimated (a-priori, as the plan,
#: :data:`PLAN_PESSIMISM` included) at most this share of the budget; elsewhere the count starts at
#: once (module docstring, Penalty calibration).
FEASIBLE_CALIBRATION_SHARE = 0.1
#: Most restarts per tabu read. Each restart is one more search of ``num_sweeps`` x variables updates,
#: about a simulated-annealing read's time (100 x 20 batch, 16 reads: 0.25 s with sa, 0.21 / 0.56 /
#: 1.56 s with 0 / 2 / 10 restarts), so the estimates count ``1 + tabu_restarts`` reads' work; the
#: sampler has no timeout of its own (one would break determinism): 1,000,000 restarts ran past
#: 60 s on 20 pods with time_limit_s=1 before the estimates counted them.
MAX_TABU_RESTARTS = 1_000


class RangeParam(Param):
    """A ``(low, high)`` pair of positive floats; from the command line ``"low,high"``."""

    def check(self, where: str, value: Any) -> Any:
        if isinstance(value, str):
            parts = [v.strip() for v in value.split(",")]
        elif isinstance(value, (list, tuple)):
            parts = list(value)
        else:
            raise InvalidSettingError(f"{where}: expected 'low,high', got {value!r}")
        if any(isinstance(v, bool) for v in parts):  # float(True) is 1.0: not a temperature
            raise InvalidSettingError(f"{where}: expected two numbers 'low,high', got {value!r}")
        try:
            pair = tuple(float(v) for v in parts)
        except (TypeError, ValueError):
            raise InvalidSettingError(f"{where}: expected two numbers 'low,high', got {value!r}") from None
        if len(pair) != 2 or not all(math.isfinite(v) and v > 0 for v in pair) or pair[0] >= pair[1]:
            raise InvalidSettingError(f"{where}: expected two positive numbers low < high, got {value!r}")
        return pair


class Qubo(Solver):
    name = "qubo"
    properties = SolverProperties(
        "batch", False, "Placement as a QUBO (dimod BQM) sampled by simulated annealing; decoded and repaired.",
        requires=("dimod", "dwave.samplers"), extra="qubo",
    )
    parameters: ClassVar[dict[str, Param]] = {
        "seed": SEED,
        "sampler": Param("sa", str, "dwave-samplers sampler: simulated annealing or tabu search.", choices=("sa", "tabu")),
        # Upper bounds: the sampler allocates reads x variables and one temperature per sweep up front
        # (num_sweeps=2**40 asked for 8 TiB and failed inside the solve).
        "num_reads": Param(16, int, "Reads (independent anneals) per sampling call.", minimum=1, maximum=100_000),
        "num_sweeps": Param(
            300, int, "Sweeps per simulated-annealing read (tabu: variable updates per search, per variable).", minimum=1,
            maximum=10_000_000,
        ),
        "beta_range": RangeParam(
            None, tuple, "Simulated annealing's inverse temperatures 'hot,cold' (none: from the model's biases).",
            nullable=True,
        ),
        "tabu_restarts": Param(
            2, int, "Restarts per tabu read (tabu sampler; no wall-clock timeout of its own: each restart counts as "
            "one more read in the time estimates).", minimum=0, maximum=MAX_TABU_RESTARTS,
        ),
        "capacity": Param(
            "unbalanced", str, "Capacity encoding: slack bits or unbalanced penalization.", choices=("slack", "unbalanced")
        ),
        "penalty": Param(
            None, float, "Fixed penalty multiplier alpha (none: calibrate).", minimum=0.0, maximum=MAX_PENALTY_ALPHA,
            nullable=True,
        ),
        "penalty_start": Param(
            0.5, float, "First penalty multiplier of the calibration.", minimum=1e-6, maximum=MAX_PENALTY_ALPHA
        ),
        "penalty_growth": Param(1.6, float, "Factor between calibration steps.", minimum=1.01),
        "max_penalty_steps": Param(12, int, "Most calibration steps.", minimum=1),
        "penalty_patience": Param(
            2, int, "Stop raising the penalty after this many steps without a better repaired read (0 = never); "
            "with refinement or the polish, also after a worse step with no feasible read.", minimum=0,
        ),
        "max_candidates": Param(8, int, "Candidate nodes per pod in the QUBO (best marginal gain first).", minimum=1),
        "batch_size": Param(100, int, "Pods per QUBO; larger problems are solved batch by batch.", minimum=1),
        "refine_steps": Param(
            150, int, "Decomposition refinement after the batches: sub-QUBOs over the pods of a few nodes, each "
            "sampled, decoded and kept when the true R improves (0 = off).", minimum=0,
        ),
        "refine_nodes": Param(2, int, "Nodes whose pods each refinement sub-QUBO places again.", minimum=1),
        "widen_nodes": Param(
            5, int, "After the refinement (and the starts), refine the best placement again in rounds of "
            "refine_nodes + 1 up to this many nodes per sub-QUBO, while time is left (refine_nodes or fewer: off; "
            "only with refine_steps > 0).", minimum=1,
        ),
        "polish": Param(True, bool, "Improve the refined result by local search scored with the true objective "
                        "(single-pod moves, node drains, pairwise swaps); false: the sampler's result alone."),
        "time_limit_s": Param(
            30.0, float, "Wall-clock budget; batches not sampled in time are placed greedily (all of them, the time "
            "going to the refinement, when sampling every batch would not leave it its share).", minimum=0.001
        ),
        "starts": Param(
            "iro-frag,best-fit", str, "Online solvers, comma-separated, or 'none': with the time left after the "
            "batches' refinement and polish, the refinement and polish also run from each one's placement, and the "
            "best by R is returned (info['starts']; only with refine_steps > 0).",
        ),
    }

    def _check_settings(self) -> None:
        import solvers

        # The names of ``starts``, in the order given (raises on an unknown, uninstalled or repeated
        # one), and their solvers, built once and kept: a start that loads something (dqn's
        # checkpoint) loads it once, not in every solve's time, and callers that ask what a solver
        # reads (reads_pod_scoring: kube-default) see the starts.
        self.start_solvers: list[str] = solver_list(
            self.name, "starts", self.starts,
            lambda _name, cls: issubclass(cls, OnlineSolver) and cls.properties.installed(),
            "online solvers installed here",
        )
        self.start_instances: list[OnlineSolver] = []
        for name in self.start_solvers:
            solver = solvers.make(name, seed=self.seed)
            assert isinstance(solver, OnlineSolver)  # start_solvers accepts online solvers only
            self.start_instances.append(solver)

    def describe(self, placement: Placement) -> str | None:
        """The plan, the batches sampled and their reads, the refinement, the start that won and
        the widening, and what the clock cut."""
        info = placement.info
        if "plan" not in info:
            return None
        sampled, greedy = info.get("batches_sampled", 0), info.get("batches_greedy", 0)
        parts = [f"plan {info['plan']}: {sampled} batch(es) sampled, {greedy} placed greedily"]
        if sampled and info.get("feasible_fraction") is not None:
            parts.append(f"feasible reads {100.0 * info['feasible_fraction']:.0f} %, {info.get('repairs', 0)} repair(s)")
        refine = info.get("refine") or {}
        if refine.get("steps"):
            parts.append(f"refinement {refine['steps']} step(s), R {refine.get('gain', 0.0):+.4f}")
        starts = info.get("starts") or {}
        if starts.get("chosen"):
            parts.append(f"best start: {starts['chosen']}")
        widen = info.get("widen") or []
        if widen:
            parts.append(f"widening R {sum(r.get('gain', 0.0) for r in widen):+.4f}")
        return self.describe_line(parts, info)

    def preload(self) -> None:
        """Load what the start solvers load (dqn's checkpoint) now, not inside the first solve's
        time limit; raises what their own ``preload`` raises (a bad checkpoint)."""
        preload_each(*self.start_instances)

    def _widens(self) -> bool:
        return bool(self.refine_steps) and self.widen_nodes > self.refine_nodes

    def use_typical_tasks(self, tasks: TypicalTasks | None) -> None:
        """Hand ``tasks`` to the start solvers that score against typical tasks (iro-frag, fgd)."""
        pass_typical_tasks(tasks, *self.start_instances)

    def _solve(self, problem: Problem, deadline: float | None) -> Placement:
        start = time.perf_counter()
        end = start + self.time_limit_s if deadline is None else min(deadline, start + self.time_limit_s)
        p = problem
        state = ClusterState(p)
        rules = _FitRules(p)  # one table per solve: static filters depend on the problem only
        batches = [np.arange(i, min(i + self.batch_size, p.num_workloads)) for i in range(0, p.num_workloads, self.batch_size)]
        info: dict[str, Any] = {"batches": [], "capacity": self.capacity, "sampler": self.sampler}
        sizes = [int(pods.size) for pods in batches]
        to_feasible = self._calibrates_to_feasible(sizes, end - start)
        info["calibration"] = "to a feasible read" if to_feasible else "with patience from the first step"
        info["plan"], info["plan_estimate_s"] = self._plan(sizes, end - start, to_feasible)
        greedy_first = info["plan"] == "greedy-first"
        cut: set[str] = set()  # the phases the wall clock stopped before their own end (module docstring, Time)
        # Seconds per pod of a batch's least work: a-priori until a batch of this solve measured it.
        per_pod = (
            BATCH_BUILD_S_PER_POD + SAMPLE_S_PER_POD_SWEEP * self.num_reads * self.num_sweeps * self._searches()
            + DECODE_S_PER_POD
        )
        for b, pods in enumerate(batches):
            # Greedy-first: every batch greedily, the time to the refinement (the estimate: its sampling's).
            estimate = self._sampling_estimate(int(pods.size), to_feasible) if greedy_first else per_pod * pods.size
            if greedy_first or end - time.perf_counter() < estimate:  # it would end past the limit: greedily instead
                if not greedy_first:  # the plan is a-priori (the same on any machine); this is the clock's
                    cut.add("batches")
                placed = _greedy(p, state, pods, rules)
                info["batches"].append(
                    {"pods": int(pods.size), "skipped": "time limit", "greedy_placed": placed, "estimate_s": estimate}
                )
                continue
            state, binfo = self._batch(p, state, pods, b, end, rules=rules, to_feasible=to_feasible)
            info["batches"].append(binfo)
            if binfo["clock_cut"]:
                cut.add("batches")
            if "least_s" in binfo:
                per_pod = binfo["least_s"] / pods.size
        info["batches_sampled"] = sum(1 for bi in info["batches"] if bi.get("steps"))
        info["batches_greedy"] = sum(1 for bi in info["batches"] if "skipped" in bi)
        if self.refine_steps:
            state, info["refine"] = self._refine(p, state, end, rules)
            if info["refine"]["clock_cut"]:
                cut.add("refine")
        if self.polish:
            info["polish_moves"] = improve(p, state, deadline=end)
            if time.perf_counter() > end:  # as cpsat's: it may have stopped at the deadline
                cut.add("polish")
        # The phases that fill the budget stop a little before it, so the answer is out within it.
        fill_end = end - max(MIN_FILL_RESERVE_S, FILL_RESERVE_SHARE * (end - start))
        if self.refine_steps and self.start_solvers:
            state, info["starts"] = self._from_starts(p, state, fill_end, rules, cut)
        if self._widens():
            state, info["widen"] = self._widen(p, state, fill_end, rules, cut)
        # Empty: the placement is the seed's, the same on any machine; else it may differ run to run.
        phases = ("batches", "refine", "polish", "starts", "widen")
        info["wall_clock_cut"] = [phase for phase in phases if phase in cut]
        done = [bi for bi in info["batches"] if bi.get("steps")]  # sampled: not greedy, not without pairs
        if done:
            info["energy"] = done[-1]["energy"]
            info["feasible_fraction"] = float(np.mean([bi["feasible_fraction"] for bi in done]))
            info["penalty"] = [bi["penalty"] for bi in done]
            info["repairs"] = int(sum(bi["repairs"] for bi in done))
            info["all_batches_feasible"] = all(bi["best_feasible"] for bi in done)
        else:  # nothing sampled (no pods, no pair that fits, or no time): the keys are still there
            info.update(energy=None, feasible_fraction=None, penalty=[], repairs=0, all_batches_feasible=True)
        return Placement(
            assignment=state.assignment.copy(),
            gpu_cards=dict(state.gpu_cards),
            reasons=unplaced_reasons(p, state, self.name),
            info=info,
        )

    def _from_starts(
        self, p: Problem, state: ClusterState, end: float, rules: _FitRules, cut: set[str]
    ) -> tuple[ClusterState, dict[str, Any]]:
        """The refinement and polish again from each start solver's placement while time is left
        (module docstring, Starts); the best by R, the batches' on a tie. Adds ``"starts"`` to
        ``cut`` where the clock stopped a start, its refinement or its polish, or left one out."""
        best, best_score = state, evaluate(p, state.assignment).score
        report: dict[str, Any] = {"chosen": "batches", "batches": best_score, "tried": {}}
        names = self.start_solvers
        later = len(names)  # starts that share the time left (the widening has what they leave)
        for i, (name, solver) in enumerate(zip(names, self.start_instances, strict=True)):
            now = time.perf_counter()
            if now > end:
                cut.add("starts")
                report["tried"][name] = {"skipped": "time limit"}
                continue
            # An equal share of what is left for each start still to run (a start's refinement ran
            # until the end: at 100 x 20 in 1 s iro-frag's took all, best-fit none).
            share_end = now + (end - now) / (later - i)
            start, _, rest = solver.run(p, deadline=share_end, stop_at_deadline=True)
            if rest:  # a part of a start is no start: the refinement would mostly place its rest
                cut.add("starts")
                report["tried"][name] = {"skipped": "time limit", "not_reached": len(rest)}
                continue
            entry: dict[str, Any] = {"start": evaluate(p, start.assignment).score}
            start, entry["refine"], moves = self._refine_and_polish(p, start, share_end, rules, cut, "starts")
            if moves is not None:
                entry["polish_moves"] = moves
            entry["score"] = evaluate(p, start.assignment).score
            entry["time_s"] = time.perf_counter() - now
            report["tried"][name] = entry
            if entry["score"] > best_score + POLISH_TOL:
                best, best_score, report["chosen"] = start, entry["score"], name
        return best, report

    def _widen(
        self, p: Problem, state: ClusterState, end: float, rules: _FitRules, cut: set[str]
    ) -> tuple[ClusterState, list[dict]]:
        """Refine ``state`` again with larger neighbourhoods (module docstring, Widening):
        one round per size from ``refine_nodes + 1`` to ``widen_nodes`` (at most the node count),
        each of at most ``refine_steps`` steps and no more than there are neighbourhoods of its
        size, then the polish, until a round gains nothing (unless a pod left out may need room:
        :func:`_room_could_be_made`); a round the clock stops adds ``"widen"`` to ``cut``."""
        rounds: list[dict] = []
        score = evaluate(p, state.assignment).score
        settled = None  # the size of a round that gained nothing: the larger ones are skipped
        for size in range(self.refine_nodes + 1, min(self.widen_nodes, p.num_nodes) + 1):
            if settled is not None:
                rounds.append({"nodes": size, "skipped": f"no gain over {settled} nodes"})
                continue
            if time.perf_counter() > end:
                cut.add("widen")
                rounds.append({"nodes": size, "skipped": "time limit"})
                continue
            steps = min(self.refine_steps, math.comb(p.num_nodes, size))
            state, report, moves = self._refine_and_polish(
                p, state, end, rules, cut, "widen", size, steps, WIDEN_STREAM + size * WIDEN_STREAM_STEP
            )
            after = evaluate(p, state.assignment).score
            rounds.append({"nodes": size, "refine": report, "polish_moves": moves, "gain": after - score})
            if after <= score and not report.get("clock_cut") and not _room_could_be_made(p, state, rules):
                settled = size
            score = after
        return state, rounds

    def _refine_and_polish(
        self, p: Problem, state: ClusterState, end: float, rules: _FitRules, cut: set[str], phase: str,
        nodes_per_step: int | None = None, steps: int | None = None, stream: int = REFINE_STREAM,
    ) -> tuple[ClusterState, dict, int | None]:
        """:meth:`_refine` then, with ``polish``, the polish (its moves, else None), both until
        ``end``; adds ``phase`` to ``cut`` where the clock stopped either."""
        state, report = self._refine(p, state, end, rules, nodes_per_step, steps, stream)
        if report["clock_cut"]:
            cut.add(phase)
        moves = None
        if self.polish:
            moves = improve(p, state, deadline=end)
            if time.perf_counter() > end:
                cut.add(phase)
        return state, report, moves

    def _sampling_estimate(self, pods: int, to_feasible: bool) -> float:
        """A-priori seconds to sample a batch of ``pods`` pods with its penalty calibration: the
        model, then per step a sampling call and every read decoded and repaired. Steps: one with a
        fixed penalty; ``max_penalty_steps`` when the calibration goes ``to_feasible`` or has no
        patience; else as many as the patience allows counted from the first step."""
        if self.penalty is not None:
            steps = 1
        elif self.penalty_patience and not to_feasible:
            steps = min(self.max_penalty_steps, self.penalty_patience + 1)
        else:
            steps = self.max_penalty_steps
        per_step = self.num_reads * (SAMPLE_S_PER_POD_SWEEP * self.num_sweeps * self._searches() + DECODE_S_PER_POD)
        return pods * (BATCH_BUILD_S_PER_POD + steps * per_step)

    def _searches(self) -> int:
        """A read's work in simulated-annealing reads: a tabu read searches once and once per
        restart, each search about an annealing read's time (:data:`MAX_TABU_RESTARTS`)."""
        return 1 + self.tabu_restarts if self.sampler == "tabu" else 1

    def _calibrates_to_feasible(self, batch_sizes: list[int], left: float) -> bool:
        """Whether the calibration counts its patience from the first feasible read: always without
        refinement and polish (the sampler's answer is the result), else where sampling every batch
        with all its steps is cheap (:data:`FEASIBLE_CALIBRATION_SHARE` of ``left``, a-priori)."""
        if not (self.refine_steps or self.polish):
            return True
        full = sum(self._sampling_estimate(n, True) for n in batch_sizes)
        return full / PLAN_PESSIMISM <= FEASIBLE_CALIBRATION_SHARE * left

    def _plan(self, batch_sizes: list[int], left: float, to_feasible: bool) -> tuple[str, dict[str, float]]:
        """How to spend ``left`` seconds (module docstring, Time): ``"sample"``, every batch sampled
        while its least work fits, or ``"greedy-first"``, every batch placed greedily and the time
        left to the refinement, when sampling every batch and the refinement's reserve
        (:data:`REFINE_STEP_S` per step, at most :data:`REFINE_RESERVE_STEPS`) do not fit. Without
        refinement there is nothing to give the time to: always ``"sample"``."""
        sampling = sum(self._sampling_estimate(n, to_feasible) for n in batch_sizes)
        reserve = REFINE_STEP_S * min(self.refine_steps, REFINE_RESERVE_STEPS)
        estimate = {"sampling": sampling, "refine_reserve": reserve, "left": left}
        if self.refine_steps and sampling / PLAN_PESSIMISM + reserve > left:
            return "greedy-first", estimate
        return "sample", estimate

    # --- one batch -------------------------------------------------------------------------

    def _refine(
        self, p: Problem, state: ClusterState, end: float, rules: _FitRules | None = None,
        nodes_per_step: int | None = None, steps: int | None = None, stream: int = REFINE_STREAM,
    ) -> tuple[ClusterState, dict]:
        """Decomposition refinement (module docstring): each step frees the pods of a few nodes
        (every other step around a pod left unplaced), builds the QUBO of those pods and of the
        unplaced pods that fit there, samples it like a batch, and keeps the result when the
        true R improves. ``nodes_per_step`` and ``steps``: ``refine_nodes`` and ``refine_steps``
        unless given (the widening's rounds); ``stream``: the seed stream of its draws."""
        nodes_per_step = self.refine_nodes if nodes_per_step is None else nodes_per_step
        steps = self.refine_steps if steps is None else steps
        rng = np.random.default_rng([self.seed, stream])
        rules = _FitRules(p) if rules is None else rules
        score = evaluate(p, state.assignment).score
        tried = accepted = 0
        gained = 0.0
        fits_alone = candidate_matrix(p, ClusterState(p))  # feasible_matrix, once per group of identical pods
        placeable = fits_alone.any(axis=1)
        chosen = np.zeros(p.num_nodes, dtype=bool)
        failed: set[bytes] = set()
        stall = 0
        # A step starts only when its estimate fits in the time left (a sampling call has no
        # deadline: num_sweeps=300,000 at time_limit_s=1 ran one 8-read sub-QUBO for 5 s): per
        # pod, a-priori until a step has measured it, then the last step's own time per pod.
        per_pod = (
            BATCH_BUILD_S_PER_POD + SAMPLE_S_PER_POD_SWEEP * REFINE_READS * self.num_sweeps * self._searches()
            + REFINE_DECODED * DECODE_S_PER_POD
        )
        planned_out: dict[str, Any] | None = None
        clock_cut = False
        for step in range(steps):
            if time.perf_counter() > end:
                clock_cut = True
                break
            hosts = np.unique(state.assignment[state.assignment >= 0])
            if hosts.size == 0:
                break
            waiting = np.flatnonzero((state.assignment < 0) & placeable)
            for _ in range(REFINE_RETRIES):  # a neighbourhood not yet tried since the last change
                if waiting.size and step % 2 == 0:  # a node where an unplaced pod fits when emptied
                    first = int(rng.choice(np.flatnonzero(fits_alone[int(rng.choice(waiting))])))
                else:
                    first = int(rng.choice(hosts))
                others = np.delete(np.arange(p.num_nodes), first)  # setdiff1d's result, without its sort
                extra = rng.choice(others, size=min(nodes_per_step - 1, others.size), replace=False)
                nodes = np.sort(np.concatenate([[first], extra]).astype(np.int64))
                key = nodes.tobytes()
                if key not in failed:
                    break
            chosen[:] = False
            chosen[nodes] = True
            sub = state.copy()
            freed = np.flatnonzero((state.assignment >= 0) & chosen[np.maximum(state.assignment, 0)])
            for w in freed:
                sub.remove(int(w))
            joining = [w for w in waiting.tolist() if (_feasible(sub, rules[w], rules.tol) & chosen).any()]
            pods = np.sort(np.concatenate([freed, np.asarray(joining, dtype=np.int64)]))
            if pods.size == 0:
                continue
            estimate, began = per_pod * pods.size, time.perf_counter()
            if end - began < estimate:  # it would end past the limit: no more steps
                planned_out = {"step": step, "pods": int(pods.size), "estimate_s": estimate, "left_s": end - began}
                clock_cut = True
                break
            tried += 1
            candidate, binfo = self._batch(
                p, sub, pods, stream + step, end, REFINE_READS, REFINE_DECODED, calibrate=False, rules=rules
            )
            clock_cut = clock_cut or binfo["clock_cut"]
            # The batch scored its best read with evaluate already (no score: nothing fitted).
            new = binfo["score"] if "score" in binfo else evaluate(p, candidate.assignment).score
            per_pod = (time.perf_counter() - began) / pods.size
            if new > score + POLISH_TOL:
                state, gained, score = candidate, gained + new - score, new
                accepted += 1
                failed.clear()
                stall = 0
            else:  # a repeat (another seed) counts too: on small clusters it rarely gains
                failed.add(key)
                stall += 1
                if stall >= REFINE_MAX_STALL:
                    break
        return state, {
            "steps": tried, "accepted": accepted, "gain": gained, "clock_cut": clock_cut, "planned_out": planned_out,
        }

    def _batch(
        self, p: Problem, state: ClusterState, pods: np.ndarray, b: int, end: float,
        reads: int | None = None, max_decoded: int | None = None, calibrate: bool = True, rules: _FitRules | None = None,
        to_feasible: bool = True,
    ) -> tuple[ClusterState, dict]:
        """Sample the QUBO of ``pods`` against ``state`` with the penalty calibration (or at the
        first penalty only); the best repaired read by the true R. ``reads`` per call (default
        ``num_reads``), of which the ``max_decoded`` lowest-energy distinct ones are decoded and
        repaired (default all). ``rules``: the solve's fit rules (default: the batch's own).
        ``to_feasible``: the patience counts from the first step with a feasible read (else at once)."""
        began = time.perf_counter()
        model = _BatchModel(p, state, pods, self.max_candidates, self.capacity, rules)
        binfo: dict[str, Any] = {
            "pods": int(pods.size), "variables": model.num_variables, "interactions": model.num_interactions, "steps": [],
            "clock_cut": False,
        }
        if model.num_pairs == 0:  # nothing fits anywhere: nothing sampled, no read to count
            binfo.update(energy=None, feasible_fraction=None, penalty=None, repairs=0, best_feasible=None, reads=0)
            return state, binfo
        best_state, best_score = None, -math.inf
        alphas = [self.penalty] if self.penalty is not None else _penalty_steps(
            self.penalty_start, self.penalty_growth, self.max_penalty_steps if calibrate else 1, model.scale
        )
        repairs = 0
        any_feasible, stall, best_before, previous = False, 0, -math.inf, -math.inf  # the penalty patience's count
        reads = self.num_reads if reads is None else reads
        max_decoded = reads if max_decoded is None else max_decoded
        sample_s = 0.0  # the last sampling call's seconds: a higher penalty is tried only when another fits
        for step, alpha in enumerate(alphas):
            if step > 0 and time.perf_counter() + sample_s > end:
                binfo["clock_cut"] = True
                break
            l1 = UNBALANCED_L1 * (1 + UNBALANCED_SHIFT_GROWTH * step)
            seed = int(np.random.default_rng([self.seed, b, step]).integers(2**31 - 1))
            sampled = time.perf_counter()
            samples, energies = self._sample(model.vectors(alpha, l1), seed, reads)
            sample_s = time.perf_counter() - sampled
            feasible = np.zeros(len(samples), dtype=bool)
            step_best: float | None = None
            step_repaired = -math.inf
            seen: dict[bytes, bool] = {}
            repaired_by_pairs: dict[bytes, tuple[ClusterState, int, float]] = {}
            order = np.argsort(energies, kind="stable")
            checked = np.zeros(len(samples), dtype=bool)
            for i in order:
                if checked.any() and time.perf_counter() > end:
                    binfo["clock_cut"] = True
                    break  # past the limit: the reads decoded so far (at least the lowest-energy one)
                sample = samples[i]
                key = sample.tobytes()
                if key not in seen and len(seen) >= max_decoded:  # the rest: not decoded
                    continue
                pairs = sample[: model.num_pairs].tobytes()
                if key not in seen:  # reads often repeat; decode each answer once
                    decoded, seen[key] = model.decode(sample, check=calibrate)
                    if pairs not in repaired_by_pairs:  # the repair depends on the pairs set only
                        repaired, changes = model.repair(decoded)
                        repaired_by_pairs[pairs] = (repaired, changes, evaluate(p, repaired.assignment).score)
                ok = seen[key]
                repaired, changes, score = repaired_by_pairs[pairs]
                feasible[i] = ok
                checked[i] = True
                if "least_s" not in binfo:  # build, one sampling call, one read: what a batch needs at least
                    binfo["least_s"] = time.perf_counter() - began
                step_repaired = max(step_repaired, score)
                if ok:
                    step_best = score if step_best is None else max(step_best, score)
                if score > best_score + 1e-12:
                    best_state, best_score = repaired, score
                    repairs = changes
            lowest = int(np.argmin(energies))
            binfo["steps"].append({
                "alpha": alpha, "penalty": alpha * model.scale, "l1": l1 if self.capacity == "unbalanced" else None,
                "feasible_fraction": float(feasible[checked].mean()),
                "reads": len(samples), "checked": int(checked.sum()),
                "energy": float(energies[lowest]), "lowest_energy_feasible": bool(feasible[lowest]),
                "best_feasible_score": step_best, "best_repaired_score": step_repaired,
            })
            if feasible[lowest]:
                break
            # A higher penalty drowns the objective: stop once it has stopped paying. Counted only
            # from the first step with a feasible read: before it, a higher penalty is what makes
            # reads feasible (bank-three-zone, seeds 0-2: the old count stopped after 3 steps with
            # none feasible; steps 5-6 reached 6-62 % and a better R on 2 of 3).
            # With refinement or the polish after it the calibration only seeds them, and where
            # waiting for a feasible read is dear (not ``to_feasible``) the count starts at once: it
            # cost 2.6x the time for the same R there (100 x 20: 4.1 s against 1.55 s, no read
            # feasible in 6 steps either way).
            seeds_search = not to_feasible
            any_feasible = any_feasible or bool(feasible.any()) or seeds_search
            if any_feasible:
                stall = 0 if step_repaired > best_before + 1e-12 else stall + 1
            # There too, a step with no feasible read that repaired worse than the step before ends
            # it: the higher penalty made no read feasible and drowned the objective further, and
            # the next step was never the best (100 x 20, seeds 0-7: the same placements, 20 steps
            # sampled instead of 27).
            worse = seeds_search and not feasible.any() and step_repaired < previous - 1e-12
            best_before, previous = max(best_before, step_repaired), step_repaired
            if self.penalty_patience and (stall >= self.penalty_patience or worse):
                break
        last = binfo["steps"][-1]
        binfo.update(
            energy=last["energy"], feasible_fraction=last["feasible_fraction"], penalty=last["penalty"],
            alpha=last["alpha"], best_feasible=last["lowest_energy_feasible"], repairs=repairs, score=best_score,
        )
        assert best_state is not None
        return best_state, binfo

    def _sample(
        self, vectors: tuple[np.ndarray, tuple[np.ndarray, ...], float], seed: int, reads: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Reads (binary, one row per read, variables in index order) and their energies of the
        BQM given by :meth:`_BatchModel.vectors`."""
        import dimod

        # A long call runs where Ctrl-C can stop it (iro_fed.interrupt): simulated annealing between
        # two reads, a tabu call only when it returns. Short calls (the refinement's) run here: a
        # thread each would cost more than they take. Only a call in a thread of its own is given
        # the interrupt test: in the main thread the test would run Python's SIGINT handler, and
        # the sampler's callback drops the KeyboardInterrupt raised there (so Ctrl-C was lost).
        stopped = threading.Event()
        work = reads * self.num_sweeps * vectors[0].size * (1 + (self.tabu_restarts if self.sampler == "tabu" else 0))
        threaded = work > INTERRUPTIBLE_WORK
        interrupt = stopped.is_set if threaded else None

        def run(call: Callable[[], tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
            return run_interruptibly(call, stopped.set) if threaded else call()

        if self.sampler == "sa":
            beta_range = list(self.beta_range) if self.beta_range is not None else _beta_range(*vectors[:2])
            if anneal_matches_sampler():  # the sampler's reads, without dimod's model and sample set
                return run(lambda: anneal(*vectors, reads, self.num_sweeps, beta_range, seed, interrupt))
        bqm = dimod.BinaryQuadraticModel.from_numpy_vectors(*vectors, "BINARY")
        if self.sampler == "sa":
            from dwave.samplers import SimulatedAnnealingSampler

            def sample_sa() -> tuple[np.ndarray, np.ndarray]:
                return _by_variable(SimulatedAnnealingSampler().sample(
                    bqm, num_reads=reads, num_sweeps=self.num_sweeps, seed=seed, beta_range=beta_range,
                    interrupt_function=interrupt,
                ))

            return run(sample_sa)
        from dwave.samplers import TabuSampler

        def sample_tabu() -> tuple[np.ndarray, np.ndarray]:
            # No wall-clock timeout (it would break determinism): each tabu search is bounded by
            # num_sweeps x variables updates, the same work as a simulated-annealing read.
            return _by_variable(TabuSampler().sample(
                bqm, num_reads=reads, seed=seed, timeout=None, num_restarts=self.tabu_restarts,
                coefficient_z_first=self.num_sweeps, coefficient_z_restart=self.num_sweeps, lower_bound_z=0,
            ))

        return run(sample_tabu)


def _by_variable(sample_set: Any) -> tuple[np.ndarray, np.ndarray]:
    """A dimod sample set's reads (one row per read, variables in index order) and energies."""
    order = np.argsort(np.asarray(list(sample_set.variables), dtype=np.int64))
    return np.asarray(sample_set.record.sample)[:, order], np.asarray(sample_set.record.energy, dtype=np.float64)


@functools.lru_cache(maxsize=256)
def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.triu_indices(n, k=1)``, kept: the same sizes recur in every sub-QUBO."""
    i, j = np.triu_indices(n, k=1)
    i.flags.writeable = False
    j.flags.writeable = False
    return i, j


def default_beta_range(bqm: Any) -> list[float]:
    """dwave-samplers' default inverse temperatures for ``bqm`` (``_default_ising_beta_range``:
    hot from the largest effective field of a spin, cold from the smallest non-zero bias and how
    many spins share it), computed with numpy: the sampler's own loop over the couplings costs
    more than sampling a small sub-QUBO."""
    lin, quad, _ = bqm.to_numpy_vectors()
    return _beta_range(lin, quad)


def _beta_range(lin: np.ndarray, quad: tuple[np.ndarray, ...]) -> list[float]:
    """:func:`default_beta_range` of the binary model ``lin, quad`` (interactions in
    ``to_numpy_vectors``' order: the sums below add in that order)."""
    rows, cols, vals = quad
    # The Ising form of a binary model: x = (s + 1) / 2.
    j = vals / 4.0
    h = lin / 2.0 + (np.bincount(rows, weights=j, minlength=lin.size) + np.bincount(cols, weights=j, minlength=lin.size))
    aj = np.abs(j)
    total = np.abs(h) + np.bincount(rows, weights=aj, minlength=lin.size) + np.bincount(cols, weights=aj, minlength=lin.size)
    smallest = np.where(h != 0, np.abs(h), np.inf)
    nz = aj > 0
    np.minimum.at(smallest, rows[nz], aj[nz])
    np.minimum.at(smallest, cols[nz], aj[nz])
    smallest = smallest[np.isfinite(smallest)]
    if smallest.size == 0:
        return [0.1, 1.0]
    hot = math.log(2) / (2 * float(total.max())) if total.max() > 0 else 1.0
    low = float(smallest.min())
    cold = math.log(int((smallest == low).sum()) / 0.01) / (2 * low)
    return [hot, cold]


#: dwave-samplers / dimod releases (major.minor) whose SimulatedAnnealingSampler :func:`anneal`
#: reproduces read for read (tests/solvers/test_g1_qubo_anneal.py); with any other the solver
#: calls SimulatedAnnealingSampler itself, so an upgrade changes speed, never the reads.
ANNEAL_VERIFIED = {"dwave-samplers": ("1.8",), "dimod": ("0.12",)}


@functools.lru_cache(maxsize=1)
def anneal_matches_sampler() -> bool:
    """Whether the installed dwave-samplers and dimod are releases :func:`anneal` was verified on."""
    from importlib.metadata import PackageNotFoundError, version

    for dist, releases in ANNEAL_VERIFIED.items():
        try:
            installed = version(dist)
        except PackageNotFoundError:
            return False
        if ".".join(installed.split(".")[:2]) not in releases:
            return False
    return True


def anneal(
    linear: np.ndarray, quad: tuple[np.ndarray, ...], offset: float, reads: int, sweeps: int,
    beta_range: list[float], seed: int, interrupt: Callable[[], bool] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``SimulatedAnnealingSampler().sample(bqm, num_reads=reads, num_sweeps=sweeps,
    beta_range=beta_range, seed=seed)`` of the binary model ``bqm = (linear, quad, offset)``:
    the same reads (binary, int8) and energies, without building dimod's model and sample sets
    (about 1 ms a call, 150 calls a solve at 100 x 20; the sampler's own work there is ~7 ms).
    What it does, step by step as dwave-samplers 1.x and dimod 0.12 do it (the exact float
    operations in their order, so the anneal is the same): the model to spins as dimod's
    ``change_vartype`` (``substitute_variables(0.5, 0.5)``: each interaction seen from both
    ends, neighbours in index order), random initial spins from ``RandomState(seed)`` as dimod's
    ``parse_initial_states``, the geometric schedule, the native anneal, then energies plus the
    spin offset and spins back to binary. ``quad`` is in ``to_numpy_vectors``' order (larger
    variable, then smaller), which the native sampler's coupler lists follow.
    tests/solvers/test_g1_qubo_anneal.py checks it against the sampler read for read."""
    from dwave.samplers.sa.simulated_annealing import simulated_annealing

    rows, cols, vals = quad
    n = linear.size
    ends, others = np.concatenate([rows, cols]), np.concatenate([cols, rows])
    both = np.concatenate([vals, vals])
    adj = np.lexsort((others, ends))  # per variable, its neighbours ascending (dimod's adjacency)
    h = linear * 0.5
    np.add.at(h, ends[adj], 0.25 * both[adj])
    # The offset summed one term at a time (cumsum adds sequentially): linear terms, then couplers.
    spin_offset = float(np.cumsum(np.concatenate([[offset], linear * 0.5, 0.125 * both[adj]]))[-1])
    states = _legacy_random(seed).choice(np.asarray([-1, 1], dtype=np.int8), size=(reads, n))
    schedule = np.array([beta_range[-1]], dtype=float) if sweeps == 1 else np.geomspace(*beta_range, num=sweeps)
    # Lists, not arrays: the wrapper copies each into a C++ vector element by element, which
    # takes half the time from a list (the same values: float64 and int64 are exact as Python numbers).
    # The remaining arguments left at their defaults, the sampler's: sequential variable order,
    # Metropolis acceptance. ``interrupt`` (the sampler's interrupt_function) is asked between
    # reads; True ends the call with the reads done.
    spins, energies = simulated_annealing(
        reads, h.tolist(), rows.tolist(), cols.tolist(), (vals * 0.25).tolist(), 1, schedule.tolist(), seed,
        np.ascontiguousarray(states), interrupt_function=interrupt,
    )
    return (spins + 1) // 2, energies + spin_offset


_local = threading.local()


def _legacy_random(seed: int) -> np.random.RandomState:
    """``np.random.RandomState(seed)``, one per thread reseeded (the same state: ``seed`` is the
    constructor's legacy seeding): a new one gathers OS entropy first, 0.25 ms a call."""
    rs = getattr(_local, "random_state", None)
    if rs is None:
        rs = _local.random_state = np.random.RandomState()
    rs.seed(seed)
    return rs


def _penalty_steps(start: float, growth: float, steps: int, scale: float) -> list[float]:
    """The calibration's multipliers ``start * growth**k``, ``k < steps``, up to the last of at
    most :data:`MAX_PENALTY_ALPHA` whose penalty ``alpha * scale`` is a finite float (``growth**k`` itself raises OverflowError past
    it: 1.6**1510, so ``max_penalty_steps=2000`` would crash before the first step)."""
    alphas: list[float] = []
    for k in range(steps):
        try:
            alpha = start * growth**k
        except OverflowError:
            break
        if alphas and (alpha > MAX_PENALTY_ALPHA or not math.isfinite(alpha * scale)):
            break
        alphas.append(alpha)
    return alphas


def _fit_rule(p: Problem, w: int) -> tuple[np.ndarray, list[tuple[int, float]], tuple[bool, int] | None]:
    """What :func:`~iro_fed.feasibility.feasible_nodes` checks for pod ``w``, node by node: its
    static mask; ``(resource, demand)`` per requested resource (``resource_fit`` compares
    ``free + fit_tolerance >= demand``); the GPU test as ``(fully free cards?, amount)`` or None."""
    d = p.demand[w]
    need = [(int(r), float(d[r])) for r in np.flatnonzero(d > 0)]
    count = int(p.wl_gpu_count[w])
    gpu = None
    if count > 0:
        milli = int(p.wl_gpu_milli[w])
        gpu = (False, milli) if count == 1 and milli < GPU_MILLI else (True, count)
    return static_filter(p, w).mask, need, gpu


class _FitRules(dict):
    """Pod -> its :func:`_fit_rule`, computed when first asked for (static filters depend on the
    problem only: one table serves a whole solve)."""

    def __init__(self, p: Problem) -> None:
        super().__init__()
        self.p = p
        self.tol = fit_tolerance(p)  # the filters' tolerance, fixed per problem (its cache is a weak dict)

    def __missing__(self, w: int) -> tuple:
        rule = self[w] = _fit_rule(self.p, w)
        return rule


def _room_could_be_made(p: Problem, state: ClusterState, rules: _FitRules) -> bool:
    """Whether a pod ``state`` leaves out fits no node now but some node of the cluster before
    any pod of the problem is placed: room made for it over several nodes at once (a larger
    widening round) might place it. A pod that fits nowhere even then stays out whatever moves,
    and one that fits now is out by R's choice (placing it would lower R)."""
    unplaced = np.flatnonzero(state.assignment < 0)
    if unplaced.size == 0:
        return False
    empty = ClusterState(p)
    return any(
        _feasible(empty, rules[int(w)], rules.tol).any() and not _feasible(state, rules[int(w)], rules.tol).any()
        for w in unplaced
    )


def _feasible(state: ClusterState, rule: tuple, tol: np.ndarray) -> np.ndarray:
    """``feasible_nodes(state, w)`` from pod ``w``'s :func:`_fit_rule`: the same comparisons over
    every node (``resource_fit``'s), without re-reading the pod's requests and filters each time
    (the greedy placements ask thousands of times per solve). ``tol``: ``fit_tolerance``."""
    mask, need, gpu = rule
    free = state.free
    ok = mask.copy()
    for r, demand in need:
        ok &= free[:, r] + tol[:, r] >= demand
    if gpu is not None:
        full, amount = gpu
        ok &= (state.gpu_full if full else state.gpu_max_free) >= amount
    return ok


def _greedy(p: Problem, state: ClusterState, pods: np.ndarray, rules: _FitRules | None = None) -> int:
    """Place ``pods`` one by one on their best node by the marginal gain of R (when positive).
    ``rules``: the solve's fit rules (default: a table of its own)."""
    rules = _FitRules(p) if rules is None else rules
    placed = 0
    assignment = state.assignment
    for w in pods.tolist():
        if assignment[w] >= 0:
            continue
        cand = np.flatnonzero(_feasible(state, rules[w], rules.tol))
        if cand.size == 0:
            continue
        gain = marginal(p, state, w, cand)
        best = int(np.argmax(gain))
        if gain[best] > 0:
            state.place(w, int(cand[best]))
            placed += 1
    return placed


class _BatchModel:
    """The QUBO of one batch of pods against a cluster state (module docstring)."""

    def __init__(
        self, p: Problem, state: ClusterState, pods: np.ndarray, max_candidates: int, capacity: str,
        rules: _FitRules | None = None,
    ) -> None:
        self.p, self.state, self.pods, self.capacity = p, state, np.asarray(pods, dtype=np.int64), capacity
        self._fit_rules = _FitRules(p) if rules is None else rules  # the solve's, when it passes them
        coef = coefficients(p)
        wts = p.weights
        # A reference: the greedy-objective placement of the batch. Candidates per pod: its
        # reference node (where it surely fits) and its best feasible nodes by marginal gain.
        ref = state.copy()
        _greedy(p, ref, self.pods, self._fit_rules)
        pw, pn = [], []
        # Feasible nodes by marginal gain, once per group of identical pods (pod_groups: a batch
        # often has several pods of one shape).
        ranked: dict[int, np.ndarray] = {}
        for members in pod_groups(p, self.pods):
            w = int(members[0])
            cand = np.flatnonzero(_feasible(state, self._fit_rules[w], self._fit_rules.tol))
            order = cand[np.argsort(-marginal(p, state, w, cand), kind="stable")] if cand.size else cand
            ranked.update(dict.fromkeys(members.tolist(), order))
        for i, w in enumerate(self.pods):
            w = int(w)
            n0 = int(ref.assignment[w])
            order = ranked[w]
            if order.size == 0:
                continue
            top = order[: max_candidates - (n0 >= 0)]
            nodes = sorted(set(top.tolist()) | ({n0} if n0 >= 0 else set()))  # as np.unique, on a few ints
            pw.extend([i] * len(nodes))
            pn.extend(nodes)
        self.pw = np.asarray(pw, dtype=np.int64)  # index into pods
        self.pn = np.asarray(pn, dtype=np.int64)
        self.num_pairs = self.pw.size
        w_of = self.pods[self.pw] if self.num_pairs else np.zeros(0, dtype=np.int64)

        # Objective biases (units of R, to maximize): per pair, per unplaced pod, per node on.
        cx = np.zeros(self.num_pairs)
        region = p.wl_region[w_of]
        has = region >= 0
        if coef.n_with_region and has.any():
            cx[has] += coef.latency_weighted[region[has], self.pn[has]]
        cx -= p.demand[w_of, p.cpu_index] * coef.carbon_per_milli_weighted[self.pn]
        if p.has_gpus:  # the GPUs' part of the node's dynamic power
            cx -= p.wl_gpu_total[w_of] * coef.carbon_per_gpu_milli_weighted[self.pn]
        switch = np.unique(self.pn[~state.on[self.pn]]) if self.num_pairs else np.zeros(0, dtype=np.int64)
        ucap, udem = p.util_capacity, p.util_demand
        # Utilization: tangent at the reference placement.
        a_ref = ref.util_used().sum(axis=0)
        b_ref = ucap[ref.on].sum(axis=0)
        valid = b_ref > 0
        m = max(int(valid.sum()), 1)
        inv = np.where(valid, 1.0 / np.where(valid, b_ref, 1.0), 0.0)
        cx += wts.utilization / m * (udem[w_of] * inv).sum(axis=1)
        con = coef.off_gain_base[switch] - wts.utilization / m * (ucap[switch] * a_ref * inv**2).sum(axis=1)
        self.cx, self.switch = cx, switch
        self._lists = (cx.tolist(), self.pods.tolist(), self.pn.tolist(), (p.wl_gpu_count[self.pods] > 0).tolist())
        self.unplaced_cost = wts.unplaced / p.num_workloads
        # Or 1: with every bias 0 (every weight 0) P was 0 and no read was feasible; any unit of R serves.
        self.scale = float(max(np.abs(cx).max(initial=0.0), np.abs(con).max(initial=0.0), self.unplaced_cost)) or 1.0

        # Variable layout: pairs, then unplaced per pod, then on per switchable node, then slack.
        n_pods = self.pods.size
        self.u0 = self.num_pairs
        self.o0 = self.u0 + n_pods
        self.on_index = {int(n): self.o0 + i for i, n in enumerate(switch)}
        next_var = self.o0 + switch.size
        lin_obj = np.zeros(next_var)
        lin_obj[: self.num_pairs] = -cx
        lin_obj[self.u0 : self.o0] = self.unplaced_cost
        lin_obj[self.o0 :] = -con
        # Penalty terms are collected unscaled (as "P = 1") and scaled per calibration step.
        self.pen_lin: list[tuple[np.ndarray, np.ndarray]] = []
        self.pen_quad: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.pen_offset = 0.0
        self.shift_lin: list[tuple[np.ndarray, np.ndarray]] = []  # the l1 part of unbalanced penalties
        self.shift_offset = 0.0
        self._one_hot(n_pods)
        # Power-on: x (1 - o), every pair on a switchable node as one term (each pair once, so
        # the sums per variable are added in the same order as pair by pair).
        on_var = np.array([self.on_index.get(int(n), -1) for n in self.pn.tolist()], dtype=np.int64)
        ks = np.flatnonzero(on_var >= 0)
        if ks.size:
            self.pen_lin.append((ks, np.ones(ks.size)))
            self.pen_quad.append((ks, on_var[ks], np.full(ks.size, -1.0)))
        next_var = self._capacities(next_var)
        self.num_variables = next_var
        self.lin_obj = np.concatenate([lin_obj, np.zeros(next_var - lin_obj.size)])
        # The quadratic penalties summed per pair of variables once (the raw terms repeat pairs:
        # a pod's variables meet in several capacity constraints), so that each calibration
        # step only scales them.
        self.quad = self._aggregate(self.pen_quad, next_var)
        self.num_interactions = int(self.quad[0].size)
        # The same interactions in dimod's order (larger variable, then smaller: what
        # to_numpy_vectors returns), which the sampler's sums over couplers follow.
        rows, cols, vals = self.quad
        by = np.lexsort((rows, cols))  # rows < cols (_aggregate)
        self.quad_dimod = (cols[by], rows[by], vals[by])
        # The linear penalty terms flattened, in order, for one np.add.at per calibration step
        # (add.at adds repeated indices in order: the same sums as term by term).
        self.pen_lin_flat = self._flatten(self.pen_lin)
        self.shift_lin_flat = self._flatten(self.shift_lin)

    # --- penalty terms ---------------------------------------------------------------------

    def _one_hot(self, n_pods: int) -> None:
        """``(sum_n x[w, n] + u[w] - 1)^2`` per pod: the terms ``_square(vs, 1, 1, ONEHOT_WEIGHT)``
        adds pod by pod (vs: the pod's pairs, then its u), in that order, built at once (a
        ``_square`` call per pod was a tenth of a refinement step's model)."""
        starts = np.searchsorted(self.pw, np.arange(n_pods + 1))  # a pod's pairs are consecutive
        first = starts[:-1] + np.arange(n_pods)  # where each pod's variables begin in vs
        last = starts[1:] + np.arange(n_pods)  # its u
        vs = np.empty(self.num_pairs + n_pods, dtype=np.int64)
        is_u = np.zeros(vs.size, dtype=bool)
        is_u[last] = True
        vs[~is_u] = np.arange(self.num_pairs)
        vs[last] = self.u0 + np.arange(n_pods)
        # With weights 1 and target 1: w (1 - 2) per variable, 2 w per pair, w per pod.
        self.pen_lin.append((vs, np.full(vs.size, ONEHOT_WEIGHT * (1.0 * 1.0 - 2.0 * 1.0 * 1.0))))
        rows, cols = [], []
        for f, m in zip(first.tolist(), (last - first + 1).tolist(), strict=True):
            i, j = _pairs(m)
            if i.size:
                rows.append(i + f)
                cols.append(j + f)
        if rows:
            i, j = np.concatenate(rows), np.concatenate(cols)
            self.pen_quad.append((vs[i], vs[j], np.full(i.size, ONEHOT_WEIGHT * 2.0 * 1.0 * 1.0)))
        self.pen_offset += ONEHOT_WEIGHT * n_pods  # 5.0 added n times: exact either way

    def _square(self, vs: np.ndarray, ws: np.ndarray, target: float, weight: float) -> None:
        """``weight * (sum ws vs - target)^2`` over binaries vs."""
        self.pen_lin.append((vs, weight * (ws * ws - 2.0 * target * ws)))
        i, j = _pairs(vs.size)
        if i.size:
            self.pen_quad.append((vs[i], vs[j], weight * 2.0 * ws[i] * ws[j]))
        self.pen_offset += weight * target * target

    def _constraint(self, vs: np.ndarray, ws: np.ndarray, free: float, next_var: int, tol: float = 0.0) -> int:
        """``sum ws vs <= free + tol`` as slack bits or unbalanced penalization (module docstring).
        ``tol`` is the filters' :func:`~iro_fed.feasibility.fit_tolerance`: with ``free`` alone as
        the bound, a pod the filters and check_placement accept (free within tol short of its
        request) was an overflow here, and the QUBO's ground state left it out."""
        room = max(free + tol, 0.0)
        unit = float(np.add.reduce(ws) / ws.size)  # ws.mean(), without its wrapper's overhead
        if self.capacity == "unbalanced":
            # -l1 h + l2 h^2 with h = (room - load) / unit
            self._square(vs, ws, room, UNBALANCED_L2 / unit**2)
            self.shift_lin.append((vs, ws / unit))
            self.shift_offset -= room / unit
            return next_var
        # The bits' layout from what is free (free + tol gave a node with room for exactly 1, 3,
        # 7 ... pods a spare bit of weight tol); the largest bit may stretch to the room.
        free = max(free, 0.0)
        ints = np.round(np.concatenate([ws, [free]])).astype(np.int64)
        g = int(np.gcd.reduce(ints[ints > 0])) if (ints > 0).any() else 1
        g = max(g, int(math.ceil(free / (2**MAX_SLACK_BITS - 1))))
        bits = max(1, int(math.ceil(math.log2(free / g + 1))))
        cs = g * 2.0 ** np.arange(bits)
        if cs.sum() > room:  # the largest bit takes what is left, so the slack never exceeds the room
            cs[-1] = max(room - cs[:-1].sum(), 0.0)
        slack = np.arange(next_var, next_var + bits)
        self._square(np.concatenate([vs, slack]), np.concatenate([ws, cs]), room, 1.0 / unit**2)
        return next_var + bits

    def _capacities(self, next_var: int) -> int:
        p, st = self.p, self.state
        if self.num_pairs == 0:
            return next_var
        tol = fit_tolerance(p)
        w_of = self.pods[self.pw]
        # Pairs by node (ascending within a node: what flatnonzero(pn == n) gives), and the pairs'
        # requests gathered once (per node below: the same values, indexed from these).
        by = np.argsort(self.pn, kind="stable")
        nodes, bounds = np.unique(self.pn[by], return_index=True)
        bounds = np.append(bounds, by.size)
        demand = np.ascontiguousarray(p.demand[w_of].T)  # [resource, pair]
        gpu_k = p.wl_gpu_count[w_of] > 0
        share_k = is_share(p, w_of)
        milli_k = np.where(share_k, p.wl_gpu_milli[w_of], GPU_MILLI).astype(np.float64)
        cards_k = np.where(share_k, 1, p.wl_gpu_count[w_of]).astype(np.float64)
        for n, a, b in zip(nodes.tolist(), bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            ks = by[a:b]
            for r in range(len(p.resources)):
                d = demand[r][ks]
                use = d > 0
                # use.any(): free rounded just below -tol (sums of 1e-9 pods on 1e-6 nodes) with no
                # candidate asking for r made a constraint over no pods, its unit the mean of nothing.
                if use.any() and d.sum() > st.free[n, r] + tol[n, r]:
                    next_var = self._constraint(ks[use], d[use], float(st.free[n, r]), next_var, float(tol[n, r]))
            gk = ks[gpu_k[ks]]
            if gk.size == 0:
                continue
            # GPU: for each size t a candidate asks for, the pods asking at least t must fit the
            # cards with at least t free (in milli, and one card each when t > half a card);
            # k-GPU pods ask for k fully free cards. Exact for the k-GPU pods and shares above
            # half a card, a relaxation of the card packing for smaller shares.
            milli, cards = milli_k[gk], cards_k[gk]
            row = st.gpu_free[n]
            for t in np.unique(milli):
                sel = milli >= t
                room = row[row >= t]
                need = milli[sel] * cards[sel]
                # At a whole card the milli sum is the card count times 1000: the same
                # constraint as the count below, which alone keeps its penalty single.
                if t < GPU_MILLI and need.sum() > room.sum():
                    next_var = self._constraint(gk[sel], need, float(room.sum()), next_var)
                if t > GPU_MILLI / 2 and cards[sel].sum() > room.size:
                    next_var = self._constraint(gk[sel], cards[sel], float(room.size), next_var)
        return next_var

    @staticmethod
    def _flatten(terms: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        if not terms:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        return np.concatenate([t[0] for t in terms]), np.concatenate([t[1] for t in terms])

    @staticmethod
    def _aggregate(terms: list[tuple[np.ndarray, np.ndarray, np.ndarray]], num_vars: int) -> tuple[np.ndarray, ...]:
        if not terms:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)
        rows = np.concatenate([q[0] for q in terms])
        cols = np.concatenate([q[1] for q in terms])
        lo, hi = np.minimum(rows, cols), np.maximum(rows, cols)
        pairs, inverse = np.unique(lo * num_vars + hi, return_inverse=True)
        vals = np.bincount(inverse, weights=np.concatenate([q[2] for q in terms]), minlength=pairs.size)
        return pairs // num_vars, pairs % num_vars, vals

    def vectors(self, alpha: float, l1: float = UNBALANCED_L1) -> tuple[np.ndarray, tuple[np.ndarray, ...], float]:
        """The BQM of :meth:`bqm` as ``(linear, (rows, cols, biases), offset)``, the interactions in
        the order ``bqm(...).to_numpy_vectors()`` gives them (by larger then smaller variable)."""
        pen = alpha * self.scale
        linear = self.lin_obj.copy()
        vs, ws = self.pen_lin_flat
        np.add.at(linear, vs, pen * ws)
        vs, ws = self.shift_lin_flat
        np.add.at(linear, vs, pen * l1 * ws)
        rows, cols, vals = self.quad_dimod
        offset = pen * (self.pen_offset + l1 * self.shift_offset)
        return linear, (rows, cols, pen * vals), offset

    def bqm(self, alpha: float, l1: float = UNBALANCED_L1) -> Any:
        """The BQM with penalty ``P = alpha * scale`` (and ``l1`` for unbalanced penalties)."""
        import dimod

        linear, quad, offset = self.vectors(alpha, l1)
        return dimod.BinaryQuadraticModel.from_numpy_vectors(linear, quad, offset, "BINARY")

    # --- decode and repair -----------------------------------------------------------------

    def decode(self, sample: np.ndarray, check: bool = True) -> tuple[dict[int, list[int]], bool]:
        """Pods -> the candidate pairs set in ``sample``, and whether the read is feasible as it
        stands (one-hot everywhere, everything placed fits, cards checked by check_placement;
        without ``check`` only the one-hot part is checked and a one-hot read reports False)."""
        p = self.p
        chosen: dict[int, list[int]] = {i: [] for i in range(self.pods.size)}
        onehot = True
        set_pairs = np.flatnonzero(sample[: self.num_pairs] > 0)
        for k in set_pairs:
            chosen[int(self.pw[k])].append(int(k))
        u = sample[self.u0 : self.o0]
        for i in range(self.pods.size):
            if len(chosen[i]) + int(u[i]) != 1:
                onehot = False
        if not onehot or not check:
            return chosen, False
        # Capacity of the raw placement on top of the state, with cards packed per node.
        assignment = self.state.assignment.copy()
        for i, ks in chosen.items():
            if ks:
                assignment[self.pods[i]] = self.pn[ks[0]]
        cards = dict(self.state.gpu_cards)
        for n in np.unique(self.pn[set_pairs]):
            mine = [int(self.pods[int(self.pw[k])]) for k in set_pairs if self.pn[k] == n]
            gpu = [w for w in mine if p.wl_gpu_count[w] > 0]
            if gpu:
                plan = pack_gpu(p, int(n), gpu, self.state.gpu_free[int(n)])
                if plan is None:
                    return chosen, False
                cards.update(zip(gpu, plan, strict=True))
        return chosen, not check_placement(p, assignment, cards)

    def repair(self, chosen: dict[int, list[int]]) -> tuple[ClusterState, int]:
        """A valid state from a read: each pod keeps its best chosen node; pods are placed in
        order of their objective bias and dropped where they no longer fit; then unplaced pods
        are placed greedily by marginal gain. Returns the state and the number of changes."""
        p = self.p
        state = self.state.copy()
        changes = 0
        wanted = []
        # Python lists of the model's arrays: numpy's scalar indexing is the cost of this loop.
        cx, pods, pn, gpu_pod = self._lists
        for i, ks in chosen.items():
            if len(ks) > 1:
                changes += len(ks) - 1
                k = max(ks, key=cx.__getitem__)
            elif ks:
                k = ks[0]
            else:
                continue
            wanted.append((-cx[k], i, k))
        wanted.sort()
        # Each pod takes the default card choice, in bias order. That can strand a GPU pod on a
        # node that fits all of its pods when packed best-fit decreasing, as decode checks them
        # (cards 750 / 750, shares 250, 250, 500, 500: both 250s on one card leave no card
        # with 500 free), so a read that decode calls feasible would lose a pod. Then the
        # node's GPU pods are placed again on the cards of that packing (any subset of a
        # packing that fits still fits).
        plans: dict[int, list[int]] = {}
        for _, i, k in wanted:
            if gpu_pod[i]:
                plans.setdefault(pn[k], []).append(pods[i])
        # A node's packing is computed when a pod first needs it (rarely): pack_gpu on the
        # batch's state, as if computed up front.
        packed: dict[int, tuple[int, ...]] = {}
        packs: dict[int, bool] = {}  # node -> its GPU pods pack

        def node_packs(n: int) -> bool:
            if n not in packs:
                plan = pack_gpu(p, n, plans[n], self.state.gpu_free[n])
                packs[n] = plan is not None
                if plan is not None:
                    packed.update(zip(plans[n], plan, strict=True))
            return packs[n]

        placed_gpu: dict[int, list[int]] = {}  # node -> GPU pods placed on it so far
        repacked: set[int] = set()
        for _, i, k in wanted:
            w, n = pods[i], pn[k]
            fits = self._fits(state, w, n)
            if (not fits and gpu_pod[i] and n not in repacked and self._fits_but_cards(state, w, n)
                    and node_packs(n)):
                for v in placed_gpu.get(n, []):
                    state.remove(v)
                for v in placed_gpu.get(n, []):
                    state.place(v, n, packed[v])
                repacked.add(n)
                fits = self._fits(state, w, n)
            if fits:
                state.place(w, n, packed.get(w) if n in repacked else None)
                if gpu_pod[i]:
                    placed_gpu.setdefault(n, []).append(w)
            else:
                changes += 1  # dropped from an overfull node
        changes += _greedy(p, state, self.pods, self._fit_rules)
        return state, changes

    def _fits(self, state: ClusterState, w: int, n: int) -> bool:
        """``feasible_nodes(state, w)[n]``: the same comparisons on node ``n`` alone, from a
        per-pod summary (the repair asks about one node per pod; the filter's vectors over
        every node cost more)."""
        mask, need, gpu = self._fit_rules[w]
        if not mask[n]:
            return False
        free, tol = state.free[n], self._fit_rules.tol[n]  # _fits_but_cards, inlined (hot)
        for r, demand in need:
            if not free[r] + tol[r] >= demand:
                return False
        if gpu is None:
            return True
        full, amount = gpu
        return bool((state.gpu_full[n] if full else state.gpu_max_free[n]) >= amount)

    def _fits_but_cards(self, state: ClusterState, w: int, n: int) -> bool:
        """Pod ``w``'s additive resources fit node ``n`` (its static filters passed when it
        became a candidate): only the card choice can be in the way."""
        free, tol = state.free[n], self._fit_rules.tol[n]
        return all(free[r] + tol[r] >= demand for r, demand in self._fit_rules[w][1])
