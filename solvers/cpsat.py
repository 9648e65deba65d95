"""``cpsat``: the joint placement of all pods as one CP-SAT model (OR-Tools).

The solver (:class:`CpSat`: hints, search, polish, time) and its large-neighbourhood search are
here; the model is :class:`solvers.cpsat_model.PlacementModel` and the moves of the polish are
:mod:`solvers.local_search` (shared with the qubo solver).

The model (:class:`~solvers.cpsat_model.PlacementModel`, whose ``_build`` follows the numbered steps):

1. **Variables.** One variable per *candidate* (pod, node) pair: the pairs that
   :func:`~iro_fed.feasibility.feasible_matrix` accepts against the initial cluster (each pod
   alone; found once per group of identical pods, :func:`candidate_matrix`), optionally
   pruned to ``max_candidates`` nodes per pod (step 5). Pods that are identical for the model
   (same requests, GPU shape and constraints, hence the same terms in R) are interchangeable,
   so they form a *group* and the variable ``x[g, n]`` counts how many of the group go to
   node n (a boolean for a pod of its own). ``sum_n x[g, n] <= |g|``; a
   pod on no node is unplaced and pays the objective's unplaced penalty. Counting instead of
   naming removes the permutations of identical pods from the search without losing a
   placement.
2. **Additive resources.** Per node and resource ``sum_g demand[g, r] x[g, n] <= capacity -
   allocated``, written only where the candidates' total demand could exceed what is free.
   Amounts are scaled by a power of ten until integral (exact; integral relative to each
   amount, so a tiny one is never read as 0; past 10^6 only for tiny amounts, up to 10^15 while
   the scaled amounts stay within 10^11; a value that is not integral even then is rounded
   conservatively at 10^6: demands up, a positive one to at least 1, free amounts down; the
   model is then not exact unless the row still admits the pod counts the feasibility module
   does, which is checked where its pods ask for equal amounts: ``info["capacity_rounded"]``).
   **Aggregate cardinality cuts** (``cardinality_cuts``): the pods whose candidates all lie in
   a node set S cannot together ask for more of a resource (cpu, memory, ..., GPU milli, fully
   free cards for k-GPU pods) than S has free. When they do by ``e``, at least the k largest
   must stay out, k the least number whose demands sum to ``e``, so at most ``count - k`` of
   them are placed (a cover cut, valid for every placement). Sets: each group's candidate set
   (the :data:`MAX_CARDINALITY_SETS` smallest) and all nodes. The LP alone places the missing
   fraction of the largest pod and pays only that fraction of the unplaced penalty; on the
   benchmark's 100 x 20 problem (GPU demand 80,930 milli against 80,450 free) the cut moves
   the bound from -0.515 to -0.595, the best placement being -0.62.
3. **GPU cards, exactly.** A share pod (``count`` 1, ``milli`` < 1000) takes ``milli`` on one
   card; a k-GPU pod takes k cards that are fully free (1000 free and no share pod on them).
   Card variables are created only where the candidates could conflict: if all GPU candidates
   of a node fit together (k-GPU pods on fully free cards, shares packed best-fit decreasing
   into the rest), any subset fits too and the node gets no GPU constraint (the packing found
   gives the cards). If a node has only k-GPU candidates, ``sum k x <= fully free cards`` is
   exact (the cards are interchangeable). Otherwise ``y[g, n, c]`` counts the share pods of
   group g on card c (only cards with at least ``milli`` free), ``t[c]`` says fully free card
   c is taken whole, with ``x[g, n] = sum_c y[g, n, c]``, ``sum_c t[c] = sum k x`` over the
   k-GPU groups, and per card ``sum milli y + 1000 t <= free``. Cards with equal free milli are
   interchangeable: their loads are ordered (``load[c] >= load[c']`` for c before c' in such a
   group), which removes the symmetric copies of each solution and no placement.
4. **Objective.** The objective module's R, term by term (:mod:`iro_fed.objective`):

   * latency: ``w2 * ref / (ref + latency_ms[region, domain(n)]) / n_with_region`` per placed
     pod (linear, exact);
   * unplaced: ``w5 / W`` per placed pod (linear, exact);
   * carbon, dynamic part: ``w4 * (1 - g[n]) * carbon_dynamic[n] / cpu_capacity[n] / max_carbon``
     per placed millicore and ``w4 * g[n] * carbon_dynamic[n] / (cards[n] x 1000) / max_carbon``
     per placed GPU milli, ``g`` the node's ``power_gpu_share`` (linear and exact: capacity keeps
     both utilizations <= 1, the min() never acts);
   * cost and idle carbon, paid per powered-on node: nodes already on (existing usage) pay a
     constant; a node that starts empty gets a boolean ``on[n]``, on exactly when it gets a pod
     (``x[g, n] <= |g| on[n]`` and ``on[n] => sum_g x[g, n] >= 1``), worth ``-(w3 cost[n] /
     max_cost + w4 carbon_idle[n] / max_carbon)``. Per resource (and GPU milli) such a node also
     gets ``sum_g d[g] x[g, n] <= free[n] on[n]`` (:data:`~solvers.cpsat_model.ON_CAPACITY_CUTS`;
     written where the amounts scale to integers exactly): implied for integers, but the big-M
     link lets the LP spread pods thinly over many nodes, each charged a fraction ``1 / |g|`` of
     its power-on, where this charges power-on in proportion to the capacity used (the
     facility-location strengthening). On consolidation problems (the benchmark's openb shapes,
     100 x 20 and 250 x 100 with every node empty, 500 x 100 with half; seeds 0-2; 10 s on 2
     cores) R rose on 7 of 9 alongside (+0.19 summed, worst -0.021) and on 6 of 9 with
     ``deterministic`` (+0.25, worst -0.023); at 100 x 20 (exact level encoding) CP-SAT's bound
     went 2.40 / 0.46 / 0.54 -> 0.13 / 0.35 / 0.50 (R -0.15 / 0.02 / 0.29);
   * utilization ``U = mean over valid resources r of A_r / B_r``, ``A_r`` the used amount
     (initial usage + placed demand, linear), ``B_r`` the capacity of the nodes on. When no
     node can power on, ``B_r`` and the valid resources are constants and U is linear in x:
     the model is exact. Otherwise the **exact disjunctive encoding over on-capacity levels**
     (the parametric "for each value b of B_r, maximize with A_r / b", folded into one model):
     the values ``B_r`` can take (initial on-capacity plus subset sums of the capacities of the
     nodes that may power on) are enumerated; ``lvl[r, b]`` is one-hot with ``sum_b b lvl[r, b]
     = B_r``; the number ``m`` of valid resources (``B_r > 0``; GPU counts only when a GPU node
     is on) is one-hot ``q[m]``; ``z[r, b, m] <= b lvl[r, b]``, ``z <= A_max q[m]``,
     ``sum_{b, m} z[r, b, m] <= A_r`` and ``A_r <= B_r``, with objective weight ``w1 / (m b)``
     per unit of z, so at the optimum ``sum z / (m b) = U`` exactly. It is used while every
     resource has at most ``exact_levels`` levels. Its amounts are integers in a unit per
     resource: a coarse one (small integers), or a finer one where amounts are tiny beside the
     others (a listed resource a node has none of, capacity 1e-6) and the finer integers stay
     small; what is left rounded widens the error bound (``levels_error``), and the model is
     not exact when that passes :data:`LEVELS_EXACT_ERROR` or a positive capacity rounded to 0
     (a node set with capacity of r would read as none, leaving r out of U's mean). Beyond that
     a **surrogate**: U is replaced
     by its tangent at the hint's placement, ``U_ref + sum_r (A_r - A_ref) / (m B_ref) - A_ref
     (B_r - B_ref) / (m B_ref^2)`` (a reward per placed unit of demand at a fixed denominator,
     a charge per unit of capacity powered on), and the model is *not* exact: the polish and
     the acceptance of every search step use the true R.

   **Integer scale.** CP-SAT needs integer objective coefficients: every coefficient (in units
   of R) is multiplied by ``S`` and rounded, with ``S = 10^k`` the largest power of ten up to
   :data:`MAX_SCALE` (10^13) such that ``S * sum |coef| * upper bound <= 2^56`` (10^13 up to
   well beyond the benchmark's sizes: R's coefficients are small). The constant part of R is
   the objective's offset, so CP-SAT's objective and bound read in units of R. Rounding changes
   the value of any placement by at most ``scale_error_bound = 0.5 * sum(upper bounds) / S``
   (about 1e-10 to 1e-9), reported in ``info``.

5. **Hint, pruning, search.** The ``hint`` solver's placement (of several, comma-separated, the
   one with the best R, or with ``gpu_guard`` the best guarded score; by default best-fit and
   iro-frag, whose placement packs GPU shares so that whole cards stay free: placing a pod that
   needs those cards takes a re-pack of shares over many nodes that no step of R's local search
   makes, so from best-fit's start the benchmark's 500 x 100 problems kept out 4 pods where
   iro-frag's keeps 1 (problem seed 1, R -0.695 -> -0.637; seed 0 5 -> 4 out, -0.755 -> -0.733,
   seed 2 -0.699 -> -0.698; 100 x 20 and 1000 x 500 within +-0.004; 10 s, 2 cores). The first
   online solver runs whole, later ones get :data:`HINT_EXTRA_SHARE` of the budget each, and the
   pods one has not reached by then are placed by the first one's rule
   (``info["hint"]["completed"]``): iro-frag takes 0.5 s at 500 x 100 and 1.8 s at
   1000 x 5000, best-fit 0.01-0.05 s, and even its first pods' packing is worth it (500 x 100 in
   1 s, seeds 0-1: R -0.884 / -0.753 from best-fit alone, -0.787 / -0.701 completed, -1.047 /
   -0.942 had the unfinished start been dropped);
   polished by single-pod moves and drains; a batch solver such as ``qubo`` may be one, with
   :data:`HINT_BATCH_SHARE` of the budget: on 200 pods packed at 98 % CPU onto 20 nodes,
   ``hint=best-fit,qubo`` reaches R -0.1679 where best-fit's start stays at -0.1724 and the
   QUBO alone gives -0.1707, since emptying a node there takes a re-pack of every node that
   neither CP-SAT's search nor LNS finds in 10 s; on the benchmark's
   openb problems the QUBO's 3 s are too few and the online starts are the better default) is given to CP-SAT
   as a complete solution hint (every variable: counts, cards, power-on, utilization levels;
   the proto's ``solution_hint``, what ``add_hint`` writes). With ``max_candidates`` (or
   automatically above :data:`AUTO_PRUNE_PAIRS` feasible pairs) each pod keeps the hint's node
   plus its best ``max_candidates`` nodes by the objective's marginal gain against the hint's
   final cluster with the pod itself taken out (nodes it still fits there first), so the model
   can move pods to where there is room.
   With ``deterministic`` (or one core, or no hint) the whole-problem model gets a share of the
   budget (:data:`FULL_SHARE_DETERMINISTIC` of the deterministic budget; on the wall clock half
   with one worker, 40 % with several, :data:`FULL_SHARE`; all of it with ``lns=False``) and the
   search below the rest, one after the other. Without it, on two cores
   or more, the search runs **alongside** CP-SAT for the whole budget, from the hint
   (:meth:`CpSat._solve_alongside`): CP-SAT gets one thread and the cores the search does
   not take (half of them, at most :data:`LNS_MAX_THREADS` search threads), it stops the search
   when it proves the model optimal, and the better of the two placements goes on to the polish
   (``info["lns"]["kept"]``). One after the other, CP-SAT's 40 % gave the bound and never a
   placement better than its hint at 500 x 100, while the search ran on one core; alongside
   (2 cores, 10 s, seeds 0-4): R -0.7612 -> -0.7484 on average, bound -0.7063 -> -0.7080
   (gap over |bound| 7.8 % -> 5.7 %); 100 x 20 -0.6896 -> -0.6877, 1000 x 500 unchanged.
   Where the search has several threads, each solves its own neighbourhood (disjoint nodes and
   pods; CP-SAT releases the GIL), and a result is merged only when no node it touches changed
   since its snapshot (:func:`_lns_merge`; ``info["lns"]["conflicts"]`` counts those set
   aside). CP-SAT runs
   with every constraint in its LP on models up to :data:`LP2_MAX_VARIABLES` variables and
   without probing (seconds of presolve on large models for nothing here). When it has not
   proved optimality, **large-neighbourhood search** uses the rest: a seeded choice of a few
   nodes (around an unplaced pod, within a domain, anywhere, or, where every node starts on, the
   nodes of placed pods with regret and nodes where their latency and carbon are worth more:
   :func:`_regret_nodes`), their pods and the unplaced pods that fit there are taken out and
   placed again by the same model built on top of the
   rest of the solution (exact for that neighbourhood), and the result is kept when the true
   R improves. A freed pod may also go to its :data:`LNS_EXTRA_TARGETS` best other nodes where
   it fits (so a neighbourhood can push a pod out to make room, which the chains of moves that
   place a large pod need; 500 x 100 at deterministic budget 10: R -0.7235 without, -0.7027
   with), among the nodes already on: with nodes that may power on among them, each model had
   14-23 power-on variables and U's levels, most stopped unsolved by their limit, and the
   neighbourhoods shrank to 2 nodes (consolidation problems, 18 of them, alongside: R up on 15,
   +0.77 summed, 500 x 100 all empty -0.192 -> -0.025 / -0.048 in two runs; with ``deterministic``, whose search
   then took about 20 steps, 27 problems: -0.16 summed, 12 up, 15 down; about 50 steps at the
   present :data:`DETERMINISTIC_SHARE`). With ``deterministic``
   both phases run one worker under deterministic time limits (the search is charged CP-SAT's
   deterministic time plus a fixed amount per step), so the same seed gives the same placement
   unless the wall-clock limit cuts in first (below).
6. **Decode and polish.** The solution is rebuilt as a :class:`~iro_fed.model.ClusterState`;
   unless CP-SAT proved the exact model optimal it is then locally improved with the *true*
   objective (:func:`improve`: each pod re-inserted at its best node by
   :func:`~iro_fed.objective.marginal`, or left out when that is better; then node drains,
   which power a node off, pairwise swaps between full nodes, and insertions of an unplaced pod
   where one pod moves out of its way (:func:`insert_by_eviction`), until no move gains; the
   hint's polish leaves the swaps out), and it is never returned worse than the hint. With
   deterministic limits, 3 seeds each: 100x20 R unchanged on two, +0.002 on one; 500x100
   +0.008, +0.014, +0.003. :func:`~iro_fed.objective.evaluate` scores it
   (the base class), never CP-SAT's own value.

**GPU guard** (``gpu_guard``, off by default). R is myopic about GPUs: with the GPU-aware power
model a core of promo-surge's GPU node (64 cores, 8 cards, 400-2600 W, GPU share 2400 / 2720)
costs 4.05 W against 9.4 W on its CPU node, so each simulator step's optimum puts CPU pods on
GPU nodes and the GPU pods of later steps find free cards without the CPU or memory to run
(24 h, seeds 101-103, 1 s batches: 12.9 % pending; 6.9 % under the CPU-only power model, whose
GPU node charged 34 W per core). :func:`guard_mask` names each pod's nodes where placing it alone
in the initial cluster leaves free GPU milli that the node's free CPU or memory can no longer
feed (greedy-objective's fed-resource rule, :mod:`solvers.gpu_guard`, a milli needing what the
batch's GPU pods ask per milli, or each card its provisioned share of the node when the batch
has none) when it fits one where it does not: what it guards against is the stranding of later
batches' GPU pods, which the model cannot see (the batch's own GPU pods it places exactly, so the
guard's whole-card rule for them is left out). Every phase then maximizes the guarded score
(:func:`guarded_score`): R less :func:`guard_penalty` (half a pod's unplaced weight,
:data:`GUARD_PENALTY_SHARE`) per pod on such a pair. The pairs stay in the model with their
coefficients lowered by the penalty, in the pruning, the search's sub-models and the single-pod
polish; the hint and the model's answer are compared by it, and the search keeps a neighbourhood's
answer by it. Stranding nodes are thus ranked last, not forbidden: a pod goes there when no other
node takes it, and the answer's guarded score is never below the hint's. The drains, swaps and
insertions (R-scored) keep to the other pairs; a pod a phase cut by the clock left out is placed
last (:func:`place_guarded_out`, until the limit less half the reserve, as the polish). Same
runs: 3.09 % pending, R -0.1486 (with ``hint=best-fit`` 2.50 %, -0.1316: every batch is proved
optimal, seed 103 parts where one has several optima; greedy-objective 3.87 %, -0.1680). The status is then
``feasible`` (not R's optimum); CP-SAT's ``objective``, ``best_bound``, ``final_gap`` and the
search's scores are of the guarded score;
``info["gpu_guard"]`` counts the guarded pairs, the hint's and the answer's pods on them
(``hint_on_guarded``, ``on_guarded``) and the pods placed last.

**What is exact.** ``status == "optimal"`` only when the model was exact (no pruning, no
utilization surrogate, no capacity row rounded so that it may keep out pods that fit, no
utilization level rounded past :data:`LEVELS_EXACT_ERROR`) and CP-SAT proved optimality with
a zero gap: the placement is then optimal for the true R up to ``scale_error_bound`` (which
includes, where the level encoding rounds amounts that are not integral,
``info["utilization_rounded"]``, the most that can change U). Otherwise the status is
``feasible``, and
``info`` says why (``exact_model``, ``pruned``, ``utilization_model``, CP-SAT's ``status``).
``pruned`` is true when the model CP-SAT was given is over pruned candidates (false when no model
was built); ``pruning``, when the candidates needed pruning, reads ``done`` or ``not
completed`` (the time limit passed during it), else None.
``info`` reports CP-SAT's objective and best bound in units of R (a bound on the true R only
when ``exact_model`` is true), the gap, wall time and model size. On a model exact for what it
maximizes (no pruning, no surrogate), ``best_bound`` is the tighter of CP-SAT's (``cpsat_bound``)
and the model's LP relaxation solved by GLOP (``lp_bound``; ``bound_source`` says which): in a
thread of its own while CP-SAT and the search run alongside, else after the polish where CP-SAT's
leaves the answer more than :data:`LP_BOUND_MIN_GAP` below it and the time limit leaves room. At
500 x 100 with ``deterministic`` CP-SAT's share of the budget ends before its own LP does (bound
+0.38 against R -0.74), and GLOP's is -0.706; on problem seed 1 alongside, CP-SAT's bound is
-0.6085 after 60 s and the LP's -0.6126. ``gap``, ``gap_abs`` and ``final_gap`` are against
``best_bound``. Its keys are the same on every
path (:data:`INFO_KEYS`: no pods or no nodes, no model built, CP-SAT not run, a step skipped), None
where the path has no value (``gap`` without a CP-SAT solution, ``lns`` when the search did not
run, ``pruning`` when no pruning was needed, ``hint`` with ``hint='none'``).

**Time.** ``time_limit_s`` (or the caller's deadline, if sooner) bounds the whole solve. A
reserve (:data:`RESERVE_SHARE` of it, at least :data:`MIN_RESERVE_S`) is kept for the final
polish and decoding; everything after the first online hint ends by the limit less the reserve.
That hint always runs whole, since it is the floor of the answer (a hint stopped at the limit
left every pod it had not reached unplaced): on a budget it does not fit, the solve ends late
with the hint's placement rather than in time with fewer pods; a later online hint stops at
the end of its share and the first one's rule places the pods it had not reached (with
``deterministic``, ``info["wall_clock_cut"]`` then names ``hint``: a faster machine would have
started elsewhere). Then its polish, the candidate
pruning and the model build (checked as variables and constraints are added; when the model cannot be
finished, CP-SAT and the search are skipped, ``info["status"]`` reads ``not_run``, and the
polished hint is the answer; pods the hint had not reached and no polish weighed, listed in
``info["not_reached"]``, say so in their reasons), then CP-SAT
and the search get the time that is left. Without a hint (``hint='none'``) and without a CP-SAT
solution in its time, nothing weighed the pods either: those the search and the final polish
did not place or weigh are in ``info["not_reached"]`` too (their reasons say the time limit
passed before CP-SAT found a solution), so time-budget's ``then`` places them, and
``info["start"]`` reads ``none`` (else ``hint`` or ``cpsat``: where the search started; the list
is empty whenever CP-SAT found a solution or a hint ran). ``info["time_s"]`` gives the seconds
of each phase (``hint``, ``hint_polish``, ``build``, ``cpsat``, ``lns``, ``polish``, ``decode``, ``total``).
Steps that cannot stop midway are kept short: the candidate pairs are found once per group of
identical pods, with the clock looked at between groups (:func:`candidate_matrix`; the whole
matrix at once took 0.12-0.25 s at 1000 x 5000 and ended the solve up to 0.15 s past a 0.2 s or
0.5 s limit; per group 0.003 s), the model build looks at it between GPU nodes too, and the
unplaced pods' reasons, written last, are found once per group (1000 x 5000 with every pod out,
``hint='none'``: 0.14-0.32 s, now 0.02-0.06 s). CP-SAT is not started with less than
:data:`MIN_CPSAT_S` left. A step whose time was up before its turn is not started and is named in
``info["skipped"]`` (``hint_polish``, ``build``, ``cpsat``, ``lns``, ``polish``; ``cpsat`` and
``lns`` when no model was built): with a limit only the hint fits, the list is all five.
What can still end the solve late: the online hint (above), one step between two looks at the
clock (the cardinality cuts' set matrix, a swap matrix of the polish: up to about 0.03 s at
1000 x 500 and 1000 x 5000), CP-SAT's loading of a model and the decoding of its answer, and the
reasons of many pods left out. The benchmark's sizes (100 x 20 to 1000 x 5000,
``max_candidates=16``, ``time_limit_s`` 0.2 / 0.5 / 1 / 2, 3 runs each, with and without
``deterministic``, 2 loaded cores): at most 0.027 s past the limit (a hint that alone took
0.21 s of 0.2), before up to 0.153 s; with ``hint='none'`` at 1000 x 500 and 1000 x 5000, 0.04 s,
before 0.35 s.

*Without* ``deterministic`` the phases share the wall clock: the hint's polish ends at
:data:`HINT_POLISH_SHARE` of the limit; CP-SAT and the search then run alongside until the
limit less the reserve (two cores or more; ``time_s`` then gives each its own span, which
overlap), or CP-SAT gets :data:`FULL_SHARE` (one worker) or :data:`FULL_SHARE_PARALLEL` of
what the build left and the search the rest.
*With* ``deterministic`` nothing is divided by the wall clock, since a share of it would make
the placement depend on the machine's speed: the hint's polish runs until no move gains (its
rounds and move counts are bounded), CP-SAT and the search are bounded by the deterministic
budget (``max_deterministic_time``, by default :data:`DETERMINISTIC_SHARE` of
``time_limit_s``, or of the time to the caller's deadline when that is sooner, in steps of
:data:`DEADLINE_STEP_S`), the final polish again until no move gains. The limit stays a hard cap over
these: a phase it stops before its own bound is named in ``info["wall_clock_cut"]``
(``hint``: a later online hint completed by the first, ``hint_polish``, ``build``, ``cpsat``, ``lns``,
``polish``). An empty list means the placement
is the seed's, the same on any machine; otherwise the budget was too small for the problem on
this machine (1000 x 5000 at 1 s: the build alone takes 0.6 s here) and a faster or slower
machine may return another placement. Without ``deterministic`` the list names only the phases
without a wall-clock share of their own (the build, CP-SAT when the build left
it no time) and the final polish.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from iro_fed.feasibility import feasible_nodes, pod_groups
from iro_fed.fragmentation import TypicalTasks
from iro_fed.interrupt import STOP_WAIT_S, stop_until
from iro_fed.model import ClusterState, Problem
from iro_fed.objective import evaluate, pair_values
from iro_fed.placement import Placement
from solvers.base import (
    SEED,
    OnlineSolver,
    Param,
    Solver,
    SolverProperties,
    pass_typical_tasks,
    preload_each,
    solver_list,
)
from solvers.cpsat_model import (
    MIN_CPSAT_S,
    PlacementModel,
    Result,
)
from solvers.local_search import (
    POLISH_TOL,
    OutOfTime,
    candidate_matrix,
    check_deadline,
    guard_mask,
    guard_penalty,
    guarded_gain,
    guarded_score,
    improve,
    on_dropped,
    place_guarded_out,
    static_mask,
    unplaced_reasons,
)

#: Prune candidates automatically (``max_candidates=None``) above this many feasible pairs.
AUTO_PRUNE_PAIRS = 200_000
#: Candidates per pod when pruning automatically.
AUTO_CANDIDATES = 32
#: Share of the time limits the whole-problem model gets when large-neighbourhood search follows:
#: with one worker, and with several (CP-SAT then solves the LP for the bound on a worker of its
#: own, so less wall time gives the same bound; 500 x 100 in 10 s on 2 cores: bound -0.643 at
#: 0.5 and 0.4, R -0.728 to -0.748 at 0.5, -0.718 at 0.4; at 0.3 the root LP was cut short once
#: in five runs under load, and one worker at 0.3 of a deterministic budget of 5 always).
FULL_SHARE = 0.5
FULL_SHARE_PARALLEL = 0.4
#: The same share of the deterministic budget (``deterministic``). The search gains more from
#: the budget than the whole model does (it rarely betters its hint in one worker's time): at a
#: budget of 0.5 x 10 s, 30 problems (the joint benchmark's 100 x 20 and 500 x 100 as built,
#: and with 100 %, 100 %, 50 % of 100 x 20, 250 x 100, 500 x 100's nodes empty; seeds 0-5), R
#: against the default before (0.25 x 10 s, share 0.5) +0.82 summed at a share of 0.5 and +1.18
#: at 0.35, the whole model's bound at 500 x 100 weaker either way (its root LP is not finished
#: in one worker's 1.75-2.5 units).
FULL_SHARE_DETERMINISTIC = 0.35
#: Deterministic budget per second of ``time_limit_s`` when ``deterministic`` is on and
#: ``max_deterministic_time`` is not given. CP-SAT's deterministic second is not a second of one
#: core (its LP at 100 x 20 is undercounted), and the hint, its polish, the build and the final
#: polish are not charged, so the share leaves room for them and for a slower or busier machine.
#: Measured on 2 cores (AMD EPYC), the 30 problems of :data:`FULL_SHARE_DETERMINISTIC`, 10 s:
#: idle, a solve took 2.0-4.1 s at 0.25 and 3.5-6.1 s at 0.5, the wall clock never cutting in,
#: and R rose at 0.5 on 28 of 30 (+1.18 summed, most on the consolidation problems: 250 x 100 all
#: empty +0.01 to +0.16); with four solves at once on the 2 cores (twice oversubscribed) 7.3-9.8 s
#: and the wall clock cut the search on 2-3 of 5 problems per run (``info["wall_clock_cut"]``, the
#: placement then the machine's), R still above the idle 0.25 on all five.
DETERMINISTIC_SHARE = 0.5
#: A caller's deadline sooner than ``time_limit_s`` sets the deterministic budget in steps of this
#: many seconds (rounded down): a ``fallback`` or ``time-budget`` around cpsat then gives it a
#: budget its deadline fits, the same on every call with the same limit.
DEADLINE_STEP_S = 0.1
#: Share of the wall-clock limit the hint's polish may take (without ``deterministic``; with it the
#: polish runs until no move gains: 500 x 100 took 1.0 to 2.1 s of 10 on a loaded machine, past
#: this share, so the placement depended on the load).
HINT_POLISH_SHARE = 0.2
#: Share of the wall-clock limit for batch solvers named in ``hint`` (qubo), all together. They
#: run on the wall clock, so with one the same seed may give another placement on a busy machine.
HINT_BATCH_SHARE = 0.3
#: Share of ``time_limit_s`` each online hint after the first may take (the first one's rule
#: places what it has not reached by then). 0.5 was better at 500 x 100 in 0.5-1 s (two seeds of
#: three) and worse at 1000 x 500 in 1-2 s (by up to 0.008).
HINT_EXTRA_SHARE = 0.3
#: Wall-clock time kept for decoding and the final polish: a share of the limit, at least MIN_RESERVE_S.
RESERVE_SHARE = 0.05
MIN_RESERVE_S = 0.05
#: Large-neighbourhood search: nodes per neighbourhood at the start, most pods per neighbourhood,
#: deterministic time per sub-model, and the deterministic time charged per iteration for its
#: Python work and CP-SAT's set-up of each sub-model, which its deterministic time leaves out (so
#: that the budget, and with it the result, does not depend on the machine; the budget then ends
#: before the wall clock). Measured at load 4-6 on 2 cores: 0.06-0.15 wall s per iteration against
#: 0.018-0.021 deterministic s per sub-model (100 x 20 and 500 x 100); the former charge of 0.01
#: let the search run 2-5 wall s per unit of budget. The R values below were measured with it.
#: Many short sub-models beat fewer long ones: 500 x 100 in 10 s, mean R over six seeds, with
#: 0.1 / 0.05 / 0.03 / 0.02 / 0.01 per sub-model: deterministic -0.728 / -0.705 / -0.696 /
#: -0.700 / -0.701; on 2 workers -0.688 / -0.686 / -0.679 (0.1 / 0.05 / 0.03).
LNS_START_NODES = 8
LNS_MAX_PODS = 160
LNS_SUB_DETERMINISTIC_S = 0.03
LNS_ITERATION_CHARGE = 0.04
LNS_MAX_STALL = 50
#: Nodes outside the neighbourhood where each freed pod may also go (its best by marginal gain).
LNS_EXTRA_TARGETS = 16
#: Most neighbourhoods solved at once on the wall clock (one per worker up to this), and the
#: fewest nodes for more than one (each needs nodes of its own). Measured on 2 cores only: see
#: the benchmarks README (joint solvers, "The search alongside CP-SAT").
LNS_MAX_THREADS = 4
LNS_PARALLEL_MIN_NODES = 4 * LNS_START_NODES
#: Regret neighbourhoods (:func:`_regret_nodes`): the least regret (units of R) that counts; the
#: better nodes are drawn from the best REGRET_POOL times as many as there are places left; pods
#: are drawn REGRET_OVERDRAW times the places for them (several may share a node); pods per
#: chunk of the best-value scan.
REGRET_MIN = 1e-12
REGRET_POOL = 3
REGRET_OVERDRAW = 4
REGRET_CHUNK = 256
#: Most ``num_workers``: more made CP-SAT refuse the model (``model_invalid``, 100,000) or the
#: parameter itself (a TypeError past 2^31).
MAX_WORKERS = 1024
#: The search's ``stopped`` when CP-SAT, run alongside it, proved the model optimal.
PROVED_ALONGSIDE = "model proved optimal"
#: The model's LP relaxation (:meth:`~solvers.cpsat_model.PlacementModel.lp_bound`) is solved
#: for a tighter bound when CP-SAT's leaves the answer more than this share of |bound| below it
#: (CP-SAT's own LP, with part of the rows on large models and within its share of the time, is
#: sometimes looser: 500 x 100 problem seed 1, -0.6085 against the LP's -0.6126 after 60 s).
LP_BOUND_MIN_GAP = 0.01
#: Least time left, per model variable, to start that LP: building and solving it took 11-21 us a
#: variable on 2 idle cores (100 x 20: 0.04 s; 500 x 100, 27,824 variables: 0.58 s; 1000 x 500
#: pruned: 0.15 s), so less than this would end at its deadline without a bound.
LP_MIN_S_PER_VARIABLE = 1e-5
#: How long the solve waits past the cap for that LP run alongside before stopping it.
LP_FINISH_WAIT_S = 0.2


#: The keys of a cpsat solve's ``info``, on every path (no pods or no nodes, no model built,
#: CP-SAT not run, a step skipped): None where the path has no value, so callers need no case
#: per path. (The empty problem lacked hint, scale_error_bound, ...; a solve without a model
#: lacked gap, num_variables, ...)
INFO_KEYS = (
    "status", "objective", "best_bound", "gap", "gap_abs", "final_gap", "exact_model", "scale", "scale_error_bound",
    "utilization_model", "utilization_rounded", "capacity_rounded", "cardinality_cuts",
    "gpu_nodes_with_card_variables", "feasible_pairs", "groups", "num_variables", "num_constraints", "build_s",
    "pruned", "pruning", "hint", "start", "deterministic_budget", "deterministic_time", "cpsat_wall_time_s", "lns",
    "polish_moves", "not_reached", "skipped", "wall_clock_cut", "wall_time_s", "time_s", "gpu_guard", "hint_dropped",
    "cpsat_bound", "lp_bound", "bound_source",
)


def _fill_info(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` with every key of :data:`INFO_KEYS` (None for those it lacks)."""
    for key in INFO_KEYS:
        info.setdefault(key, None)
    return info


class CpSat(Solver):
    name = "cpsat"
    properties = SolverProperties(
        "batch",
        True,
        "All pods jointly as a CP-SAT model (OR-Tools): exact GPU cards, R linearized; proves optimality when exact.",
        requires=("ortools",),
        extra="cpsat",
    )
    parameters: ClassVar[dict[str, Param]] = {
        "seed": SEED,
        "time_limit_s": Param(
            10.0, float, "Wall-clock budget of the whole solve in seconds (hint, model build, search, polish); "
            "info['time_s'] shows where it went.", minimum=0.001,
        ),
        "num_workers": Param(
            0, int, "Cores when deterministic is false (0 = every core this process may use): from two, the "
            "large-neighbourhood search runs alongside CP-SAT on half of them (at most 4 threads), CP-SAT's workers on "
            "the rest.", minimum=0, maximum=MAX_WORKERS,
        ),
        "relative_gap": Param(
            0.0, float, "Stop when CP-SAT's gap relative to max(1, |R|) is at most this (0 = prove optimality).",
            minimum=0.0, maximum=1.0,
        ),
        "hint": Param(
            "best-fit,iro-frag", str,
            "Solver whose placement is CP-SAT's starting hint, several comma-separated, each once (the one with the "
            "best R is used, or with gpu_guard the best guarded score), or 'none'. The first online solver runs "
            "whole (the floor of the answer); each later one gets 30 % of time_limit_s, the first one placing the "
            "pods it has not reached by then; a batch solver (qubo) gets 30 % of time_limit_s (shared by such hints).",
        ),
        "max_candidates": Param(
            None, int,
            f"Candidate nodes per pod in the whole-problem model, plus the hint's node (none: all, or "
            f"{AUTO_CANDIDATES} above {AUTO_PRUNE_PAIRS:,} feasible pairs).",
            minimum=1, nullable=True,
        ),
        "deterministic": Param(
            True, bool, "One search worker, deterministic time limits and polishing until no move gains, so the same "
            "seed gives the same placement; time_limit_s stays a hard cap, and where it cut a phase short "
            "info['wall_clock_cut'] names it (the placement may then differ by machine).",
        ),
        "max_deterministic_time": Param(
            None, float, "Deterministic time budget (CP-SAT's unit, 1-2 CPU-seconds here) when deterministic is true "
            "(none: half of time_limit_s: on an idle machine the solve takes about half of the limit, so the wall clock "
            "does not cut in first and the seed fixes the result; on a busy one it may, and info['wall_clock_cut'] says so).",
            minimum=0.001, nullable=True,
        ),
        "exact_levels": Param(
            256, int, "Most on-capacity levels per resource for the exact utilization encoding (else a surrogate).",
            minimum=1,
        ),
        "cardinality_cuts": Param(
            True, bool, "Aggregate cover cuts: pods confined to a node set that cannot all fit there (a tighter bound)."
        ),
        "lns": Param(
            True, bool, "When the whole-problem model is not proved optimal, large-neighbourhood search with the rest "
            "of the budget (small exact models over a few nodes' pods).",
        ),
        "polish": Param(True, bool, "Improve the hint and the result by single-pod moves scored with the true objective."),
        "lp_bound": Param(
            True, bool, "Solve the model's LP relaxation (GLOP) for a bound tighter than CP-SAT's, on a model without "
            "pruning or surrogate: alongside CP-SAT and the search (deterministic false), else after the polish in the "
            "time left when CP-SAT's bound leaves the answer more than 1 % of |bound| below it (info['lp_bound'], "
            "info['bound_source']). It never changes the placement.",
        ),
        "gpu_guard": Param(
            False, bool, "Rank last each pod's nodes where it alone would strand GPUs for later batches "
            "(greedy-objective's online rule) when it fits one where it would not: every phase maximizes R less half "
            "a pod's unplaced weight per pod on such a node. Not R's optimum (status feasible); info['gpu_guard'] "
            "counts what it did.",
        ),
    }

    def _check_settings(self) -> None:
        import solvers

        # The names of ``hint``, in the order given (raises on an unknown or repeated one), and
        # their solvers, built once and kept: a hint that loads something (dqn's checkpoint) loads
        # it once, not in every solve's time, and callers that ask what a solver reads
        # (reads_pod_scoring: kube-default) see the hints.
        self.hint_solvers: list[str] = solver_list(
            self.name, "hint", self.hint, lambda name, _cls: name != self.name, f"solvers other than {self.name}"
        )
        self.hint_instances: list[Solver] = [solvers.make(name, seed=self.seed) for name in self.hint_solvers]
        # OR-Tools is imported when the solver is built, not inside the first solve's time_limit_s
        # (about 1.1 s with the pandas it pulls in: a 1 s budget was spent before the hint ran).
        from ortools.sat.python import cp_model  # noqa: F401

    def use_typical_tasks(self, tasks: TypicalTasks | None) -> None:
        """Hand ``tasks`` to the hint solvers that score against typical tasks (fgd, iro-frag): the
        trace replay's are those of the original pod list; from a 50-1000-pod window a hint
        computed its own (iro-frag as a window-50 hint on 100 nodes: 4.13 -> 4.55 % unallocated)."""
        pass_typical_tasks(tasks, *self.hint_instances)

    def describe(self, placement: Placement) -> str | None:
        """CP-SAT's status, objective, bound and gap, the model's size, where the answer came
        from and what the clock cut."""
        info = placement.info
        parts = [f"CP-SAT {info.get('status') or 'not run'}"]
        bound = info.get("best_bound")
        if bound is not None:
            # (the LP's bound is there without a solution of CP-SAT's, as when its time ran out first)
            source = " (the model's LP relaxation)" if info.get("bound_source") == "lp relaxation" else ""
            solution = f"its solution {info['objective']:.4f}, " if info.get("objective") is not None else ""
            parts.append(f"{solution}bound {bound:.4f}{source}")
            if info.get("final_gap") is not None and placement.objective is not None:
                # (with gpu_guard the bound is the guarded score's: not comparable with R)
                below = max(bound - placement.objective.score, 0.0)
                over_bound = f", {100.0 * below / abs(bound):.2f} % of |bound|" if bound and not info.get("gpu_guard") else ""
                parts.append(f"the answer's gap {100.0 * max(info['final_gap'], 0.0):.2f} % of R shifted to start at 0"
                             + over_bound)
        if info.get("num_variables") is not None:
            parts.append(f"{info['num_variables']:,} variables" + (" (candidates pruned)" if info.get("pruned") else ""))
        if info.get("start"):
            parts.append(f"answer from {info['start']}" + (", polished" if info.get("polish_moves") else ""))
        return self.describe_line(parts, info)

    def preload(self) -> None:
        """Load what the hint solvers load (dqn's checkpoint) now, not inside the first solve's
        time limit; raises what their own ``preload`` raises (a bad checkpoint)."""
        preload_each(*self.hint_instances)

    # --- solve -----------------------------------------------------------------------------

    def _solve(self, problem: Problem, deadline: float | None) -> Placement:
        start = time.perf_counter()
        end = start + self.time_limit_s if deadline is None else min(start + self.time_limit_s, deadline)
        reserve = max(MIN_RESERVE_S, RESERVE_SHARE * (end - start))
        # Every phase but the final polish ends by ``cap``: the hint, the build (abandoned when it
        # cannot finish: the hint is returned), CP-SAT and the search (module docstring, "Time").
        cap = end - reserve
        # CP-SAT's and the search's deterministic budget (None without ``deterministic``).
        det_budget = self._deterministic_budget(self._limit_s(start, deadline))
        p = problem
        info: dict[str, Any] = {}
        if p.num_workloads == 0 or p.num_nodes == 0:
            # Nothing to place (or nowhere): the empty placement is optimal, its R both objective
            # and bound. The keys of a solve that built a model, so callers need no special case.
            state = ClusterState(p)
            score = evaluate(p, state.assignment).score
            # Nothing was rounded and no search ran; what never happened (hint, model size, search) is None.
            info.update(
                status="optimal", exact_model=True, num_variables=0, objective=score, best_bound=score, gap_abs=0.0,
                gap=0.0, final_gap=0.0, start="none", pruned=False, not_reached=[], skipped=[], wall_clock_cut=[],
                scale_error_bound=0.0, utilization_rounded=False, capacity_rounded=False,
                deterministic_budget=det_budget, cpsat_wall_time_s=0.0, deterministic_time=0.0,
            )
            reasons = unplaced_reasons(p, state, self.name)
            info["wall_time_s"] = time.perf_counter() - start
            info["time_s"] = {"total": info["wall_time_s"]}
            return Placement(
                assignment=state.assignment.copy(), reasons=reasons, status="optimal", info=_fill_info(info)
            )
        times: dict[str, float] = {}
        # Phases that time_limit_s stopped before their own budget ran out (the deterministic
        # budget, or no move left to gain): empty, a deterministic solve is reproducible.
        cut: list[str] = []
        # Optional steps not started because their time had run out (module docstring, "Time").
        skipped: list[str] = []
        lap = start

        def phase(name: str) -> None:
            nonlocal lap
            now = time.perf_counter()
            times[name] = now - lap
            lap = now

        # The hint: an online solver's placement, polished (also the floor of what is returned).
        hint_state: ClusterState | None = None
        # Pods no hint placed or weighed: without a hint, every pod (should no model be built,
        # nothing but the final polish weighs them); a hint reaches every pod.
        unreached: list[int] = list(range(p.num_workloads))
        # Pods a polish's single-pod round reached (weighed by R, even when left out): never
        # ``not_reached``, though the hint had not reached them.
        weighed = np.zeros(p.num_workloads, dtype=bool)
        # gpu_guard: the pairs not ranked last (None: all; off, or nothing strands). Every phase
        # maximizes the guarded score (guarded_score: R less a penalty per pod on the other pairs).
        allowed: np.ndarray | None = None
        if self.gpu_guard:
            info["gpu_guard"] = {"guarded_pairs": 0, "hint_on_guarded": 0, "placed_last": 0, "on_guarded": 0}
            try:
                allowed = guard_mask(p, ClusterState(p), deadline=cap)
            except OutOfTime:  # stopped by the clock: no pair ranked last
                cut.append("gpu_guard")
                skipped.append("gpu_guard")
        if self.hint_solvers:
            # Several: the best R wins (with gpu_guard the best guarded score, which every phase
            # maximizes), the first on a tie (a portfolio of starting points; one that packs GPU
            # shares tightly can hold pods that R's local moves cannot make room for).
            starts: dict[str, ClusterState] = {}
            tried: dict[str, float] = {}  # R, reported
            ranked: dict[str, float] = {}  # what picks the hint: guarded_score (R without the guard)
            batch = [h for h in self.hint_instances if not isinstance(h, OnlineSolver)]
            # Online hints after the first that did not finish in their share: pods the first one's
            # rule then placed.
            completed: dict[str, int] = {}
            first: OnlineSolver | None = None
            extra_s = 0.0  # seconds those took (the hint's polish gets them back)
            for name, hint_solver in zip(self.hint_solvers, self.hint_instances, strict=True):
                if isinstance(hint_solver, OnlineSolver) and first is None:
                    # The first online hint runs whole, whatever the limit: it is the floor of the
                    # answer, and one stopped at the cap left the pods it had not reached unplaced (a
                    # replay with --batch-window 1000 and 2 s per batch failed 2,825 pods: 26 %
                    # unallocated GPU where the whole hint gives 4 %). Past the limit the answer is
                    # late, not empty.
                    starts[name], _, _ = hint_solver.run(p)
                    first = hint_solver
                elif isinstance(hint_solver, OnlineSolver):
                    # Later ones are further starting points, not the floor: each gets
                    # HINT_EXTRA_SHARE of the budget (iro-frag takes 0.5 s at 500 x 100 and 1.8 s at
                    # 1000 x 5000, best-fit 0.01-0.05 s), so a short time_limit_s is kept; the pods
                    # it had not reached by then are placed by the first one's rule (best-fit's
                    # decisions take milliseconds), so the time it had is not lost.
                    t_extra = time.perf_counter()
                    state_x, _, rest = hint_solver.run(
                        p, deadline=min(cap, t_extra + HINT_EXTRA_SHARE * (end - start)), stop_at_deadline=True
                    )
                    if rest:
                        first.reset(p)
                        first.place_pods(state_x, rest)
                        completed[name] = len(rest)
                    starts[name] = state_x
                    extra_s += time.perf_counter() - t_extra
                else:  # a batch solver (qubo): its share of the budget, split between such hints
                    share = HINT_BATCH_SHARE * (end - start) / len(batch)
                    found = hint_solver.solve_until(p, min(cap, time.perf_counter() + share))
                    starts[name] = ClusterState.with_assignment(p, found.assignment, found.gpu_cards)
                tried[name] = evaluate(p, starts[name].assignment).score
                ranked[name] = guarded_score(p, starts[name], allowed, tried[name])
            chosen = max(ranked, key=ranked.__getitem__)  # max keeps the first of equals
            hint_state = starts[chosen]
            unreached = []  # a hint reaches every pod
            info["hint"] = {"solver": chosen, "score": tried[chosen]}
            if allowed is not None:
                info["gpu_guard"]["hint_on_guarded"] = on_dropped(hint_state, allowed)
                info["hint"]["guarded_score"] = ranked[chosen]
            if len(tried) > 1:
                info["hint"]["tried"] = tried
                if allowed is not None:
                    info["hint"]["tried_guarded"] = ranked
            if completed:
                info["hint"]["completed"] = {"by": getattr(first, "name", None), "pods": completed}
                if self.deterministic:  # a faster machine would have reached more of them: another start
                    cut.append("hint")
            phase("hint")
            if self.polish:
                # No swaps here: a hint polished by swaps sent CP-SAT's search elsewhere, better or
                # worse by up to 0.02 in R by seed (100x20, 500x100); the final polish has them.
                # Deterministic: until no move gains (a share of the wall clock would make the hint,
                # and all that follows, depend on the machine's speed), within the cap.
                polish_end = cap
                if not self.deterministic:
                    polish_share = HINT_POLISH_SHARE + (HINT_BATCH_SHARE if batch else 0.0)
                    polish_end = min(cap, start + polish_share * (end - start) + extra_s)
                moves = 0
                if time.perf_counter() > polish_end:
                    skipped.append("hint_polish")  # it would stop before its first move
                else:
                    moves = improve(p, hint_state, deadline=polish_end, swaps=False, weighed=weighed, allowed=allowed)
                if self.deterministic and time.perf_counter() > polish_end:
                    cut.append("hint_polish")
                info["hint"].update(polish_moves=moves, polished_score=evaluate(p, hint_state.assignment).score)
                phase("hint_polish")

        # The whole-problem model over the candidate pairs.
        state0 = ClusterState(p)
        full: PlacementModel | None = None
        pruned = False
        pruning: str | None = None  # when needed: "done", or "not completed" when the time ran out
        try:
            if time.perf_counter() > cap:
                skipped.append("build")  # not one step of it would fit
                raise OutOfTime
            cand = candidate_matrix(p, state0, deadline=cap)
            total_pairs = int(cand.sum())
            info["feasible_pairs"] = total_pairs
            if allowed is not None:
                info["gpu_guard"]["guarded_pairs"] = int((cand & ~allowed).sum())
            limit = self.max_candidates
            if limit is None and total_pairs > AUTO_PRUNE_PAIRS:
                limit = AUTO_CANDIDATES
            pruned = limit is not None and bool((cand.sum(axis=1) > limit + 1).any())
            if pruned:
                assert limit is not None
                pruning = "not completed"
                cand = _prune(p, cand, hint_state, limit, deadline=cap, allowed=allowed)
                pruning = "done"
            full = PlacementModel(
                p, state0, np.arange(p.num_workloads), cand, self.exact_levels, hint_state, self.cardinality_cuts,
                deadline=cap, allowed=allowed,
            )
        except OutOfTime:
            cut.append("build")  # no model in the budget: the hint (polished if time is left) is the answer
            skipped.extend(["cpsat", "lns"] if self.lns else ["cpsat"])
        # ``pruned``: the model CP-SAT solved is over pruned candidates (not when none was built).
        pruned = pruned and full is not None
        info["pruned"] = pruned
        if pruning is not None:
            info["pruning"] = pruning
        if full is not None:
            info.update(full.info)
            info.update(
                groups=len(full.members), num_variables=full.num_variables, num_constraints=full.num_constraints,
                build_s=time.perf_counter() - start,
            )
        phase("build")
        # With deterministic limits the split between the whole model and the search after it is
        # in deterministic time (the wall clock only caps it); otherwise in wall-clock time.
        info["deterministic_budget"] = det_budget
        # num_workers 0: the cores this process may use (CP-SAT's own 0 counts the machine's,
        # past a CPU affinity or a container's cpuset).
        workers = 1 if self.deterministic else self._cores()
        parallel = workers > 1
        # Without deterministic limits, on two cores or more, the search runs alongside CP-SAT.
        alongside = self._alongside(p) if self.lns and full is not None and hint_state is not None else None
        if not self.lns or alongside is not None:
            share = 1.0
        elif det_budget is not None:
            share = FULL_SHARE_DETERMINISTIC
        else:
            share = FULL_SHARE_PARALLEL if parallel else FULL_SHARE
        wall = cap - time.perf_counter()
        if det_budget is None:
            wall *= share
        result = Result("not_run", None, None, None, 0.0, 0.0, False)
        searched: tuple[ClusterState, dict[str, Any]] | None = None  # the search run alongside CP-SAT
        lp: _LpAlongside | None = None  # the model's LP relaxation, solved while CP-SAT and the search run
        if full is not None and wall >= MIN_CPSAT_S and alongside is not None:
            assert hint_state is not None
            if self.lp_bound and full.exact and not pruned:
                lp = _LpAlongside(full, cap)
            try:
                result, searched, times["lns"] = self._solve_alongside(
                    p, full, hint_state, wall, cap, alongside, allowed, settles=full.exact and not pruned
                )
            finally:
                if lp is not None:  # no wait once CP-SAT has proved its optimum: no bound is tighter
                    lp.finish(0.0 if result.proved else LP_FINISH_WAIT_S)
        elif full is not None and wall >= MIN_CPSAT_S:
            det_limit = None if det_budget is None else share * det_budget
            result = full.solve(self.seed, wall, det_limit, workers, self.relative_gap)
            if det_limit is not None and result.status in ("feasible", "unknown") and (
                result.deterministic_time < 0.999 * det_limit
            ):
                cut.append("cpsat")  # stopped by the wall clock before its deterministic limit
        elif full is not None:
            # Less time left than CP-SAT's least run (and loading the model takes longer): not started.
            cut.append("cpsat")
            skipped.append("cpsat")
        phase("cpsat")
        # Why CP-SAT was given the whole model again without the hint (a native failure), else None.
        info["hint_dropped"] = full.info.get("hint_dropped") if full is not None else None
        # ``settled``: proved optimal for the model it was given; that is R's optimum unless the
        # guard's penalty was in it (then the guarded score's optimum: nothing left to search).
        settled = full is not None and full.exact and not pruned and result.proved
        exact = full is not None and full.exact and not pruned and allowed is None
        optimal = exact and result.proved
        info.update(
            status=result.status, cpsat_wall_time_s=result.wall_time, deterministic_time=result.deterministic_time,
            objective=result.objective, best_bound=result.bound, exact_model=exact,
        )
        lowest = -(p.weights.cost + p.weights.carbon + p.weights.unplaced)  # R's smallest possible value
        if result.bound is not None and result.objective is not None:
            info.update(
                gap_abs=result.bound - result.objective,
                gap=(result.bound - result.objective) / max(result.bound - lowest, 1e-12),
            )
        candidates = [s for s in (result.state, hint_state) if s is not None]
        state = max(candidates, key=lambda s: guarded_score(p, s, allowed)) if candidates else state0.copy()
        if result.state is not None and state is result.state:
            info["start"] = "cpsat"
        else:  # "none": neither a hint nor CP-SAT gave a placement (hint='none', no solution in time)
            info["start"] = "hint" if hint_state is not None else "none"
        if searched is not None:  # the search ran alongside CP-SAT, from the hint
            found, info["lns"] = searched
            info["start"] = "hint"
            options = {"search": found, "cpsat": result.state, "hint": hint_state}
            kept = "cpsat" if settled else max(  # max keeps the first of equals: the search's
                (k for k, v in options.items() if v is not None), key=lambda k: guarded_score(p, options[k], allowed)
            )
            state = options[kept]
            info["lns"]["kept"] = kept
        state = state.copy()

        # Large-neighbourhood search and polish with the true objective.
        if self.lns and not settled and full is not None and searched is None:
            det_left = None if det_budget is None else det_budget - result.deterministic_time
            late = time.perf_counter() >= cap
            state, info["lns"] = self._lns(p, state, cap, det_left, allowed, self._lns_threads(p))
            if late and info["lns"]["iterations"] == 0:
                skipped.append("lns")
            if info["lns"]["stopped"] == "wall clock":
                cut.append("lns")
            phase("lns")
        if self.polish and not settled:
            # Half the reserve is left for the unplaced reasons and the scoring after the polish,
            # so the whole solve stays within time_limit_s (500 x 100 took 10.00 s of 10 with drains
            # and swaps polishing up to the limit).
            polish_end = end - 0.5 * reserve
            info["polish_moves"] = 0
            if time.perf_counter() > polish_end:
                skipped.append("polish")  # it would stop before its first move
            else:
                info["polish_moves"] = improve(p, state, deadline=polish_end, weighed=weighed, allowed=allowed)
            if time.perf_counter() > polish_end:
                cut.append("polish")
            phase("polish")
        if allowed is not None:
            # What a phase cut short by the clock left out (none when the polish ran): a few
            # checks per pod, by the limit less half the reserve as the polish (the other half is
            # the scoring's and the unplaced reasons'). Cut only when it left pods unseen.
            placed_last, unseen = place_guarded_out(p, state, allowed, deadline=end - 0.5 * reserve)
            info["gpu_guard"]["placed_last"] = placed_last
            if unseen:
                cut.append("gpu_guard")
            info["gpu_guard"]["on_guarded"] = on_dropped(state, allowed)
        # CP-SAT's bound is on what its model maximized: with gpu_guard the guarded score, so the
        # final gap compares it with the answer's guarded score (R's would read below the bound).
        on_guarded = info["gpu_guard"]["on_guarded"] if allowed is not None else None
        final = guarded_score(p, state, allowed, on_guarded=on_guarded)
        # CP-SAT's bound, or the model's LP relaxation's where that is tighter: only for a model
        # exact for what it maximizes (on pruned candidates the LP's bound, tighter than CP-SAT's,
        # fell below the polished answer's R: 1000 x 500, -0.6475 against -0.6465). Solved
        # alongside CP-SAT and the search, else where CP-SAT's leaves the answer more than
        # LP_BOUND_MIN_GAP below it, in the time the solve has left: it never changes the placement.
        bound = result.bound
        info.update(cpsat_bound=bound, bound_source=None if bound is None else "cpsat")
        if lp is not None:  # solved alongside (or stopped at the cap: None)
            info["lp_bound"] = lp.bound
            if lp.bound is not None and not settled and (bound is None or lp.bound < bound):
                bound = lp.bound
                info["bound_source"] = "lp relaxation"
        elif self.lp_bound and full is not None and full.exact and not pruned and not settled and (
            bound is None or bound - final > LP_BOUND_MIN_GAP * abs(bound)
        ):
            lp_end = end - 0.5 * reserve  # the rest is the reasons' and the scoring's, as the polish
            if lp_end - time.perf_counter() >= LP_MIN_S_PER_VARIABLE * full.num_variables:
                info["lp_bound"] = full.lp_bound(deadline=lp_end)
                phase("lp_bound")
                if info["lp_bound"] is not None and (bound is None or info["lp_bound"] < bound):
                    bound = info["lp_bound"]
                    info["bound_source"] = "lp relaxation"
        if bound is not result.bound:
            info["best_bound"] = bound
            if result.objective is not None:
                info.update(gap_abs=bound - result.objective,
                            gap=(bound - result.objective) / max(bound - lowest, 1e-12))
        info["wall_time_s"] = time.perf_counter() - start
        if bound is not None:
            info["final_gap"] = (bound - final) / max(bound - lowest, 1e-12)
        # ``not_reached``: for a caller that can still place them (time-budget's ``then``). CP-SAT's
        # solution weighs every pod of the model; without one (no model built, or none found in
        # its time) and without a hint, the pods no polish weighed were not R's choice. A search
        # from nothing that found no solution left every pod out "because R said so" before.
        unweighed = unreached if result.state is None else []
        info["not_reached"] = _not_reached(state, unweighed, weighed)
        why = "a model was built (no hint)." if full is None else "CP-SAT found a solution (no hint)."
        reasons = unplaced_reasons(p, state, self.name, set(info["not_reached"]), why)
        phase("decode")
        info["time_s"] = dict(times, total=lap - start)
        info["wall_clock_cut"] = cut
        info["skipped"] = skipped
        return Placement(
            assignment=state.assignment.copy(),
            gpu_cards=dict(state.gpu_cards),
            reasons=reasons,
            status="optimal" if optimal else "feasible",
            info=_fill_info(info),
        )

    def _deterministic_budget(self, limit_s: float) -> float | None:
        """CP-SAT's and the search's deterministic budget (None without ``deterministic``):
        ``max_deterministic_time``, else :data:`DETERMINISTIC_SHARE` of ``limit_s``, the solve's
        limit (:meth:`_limit_s`)."""
        if not self.deterministic:
            return None
        return self.max_deterministic_time or DETERMINISTIC_SHARE * limit_s

    def _limit_s(self, start: float, deadline: float | None) -> float:
        """The seconds the solve may take: ``time_limit_s``, or the time to the caller's deadline
        when sooner, rounded down to :data:`DEADLINE_STEP_S` so that the deterministic budget it
        gives is the same from one call to the next (a composite computes the deadline an
        instant before the call)."""
        if deadline is None or deadline - start >= self.time_limit_s:
            return self.time_limit_s
        return max(0.0, round(math.floor((deadline - start) / DEADLINE_STEP_S) * DEADLINE_STEP_S, 9))

    def _cores(self) -> int:
        """The cores a solve without ``deterministic`` uses: ``num_workers``, 0 meaning those this
        process may use."""
        return self.num_workers or _usable_cores()

    def _lns_threads(self, p: Problem) -> int:
        """Neighbourhoods solved at once by a search after CP-SAT (not alongside it): one with
        ``deterministic`` (reproducible) or one worker; else one per worker (``num_workers``, 0:
        the cores this process may use), at most :data:`LNS_MAX_THREADS`, and one where the nodes
        are too few to give each a neighbourhood of its own (fewer than :data:`LNS_PARALLEL_MIN_NODES`)."""
        return 1 if self.deterministic else _search_threads(p, self._cores())

    def _alongside(self, p: Problem) -> tuple[int, int] | None:
        """(CP-SAT workers, search threads) when the search runs alongside CP-SAT: without
        ``deterministic``, on two cores or more (``num_workers``, 0: the cores this process may
        use); the search takes half the cores, at most :data:`LNS_MAX_THREADS` (one where the
        nodes are fewer than :data:`LNS_PARALLEL_MIN_NODES`), CP-SAT the rest. None: one after
        the other."""
        if self.deterministic:
            return None
        cores = self._cores()
        if cores < 2:
            return None
        threads = _search_threads(p, cores // 2)
        return cores - threads, threads

    def _solve_alongside(
        self, p: Problem, full: PlacementModel, hint: ClusterState, wall: float, cap: float, plan: tuple[int, int],
        allowed: np.ndarray | None, settles: bool,
    ) -> tuple[Result, tuple[ClusterState, dict[str, Any]], float]:
        """CP-SAT on the whole model (``plan[0]`` workers, in a thread of its own: it releases the
        GIL) while the search improves the hint (``plan[1]`` threads), both until ``cap``; each
        placement CP-SAT finds is offered to the search, which takes it where it is better than
        its own (``info["lns"]["adopted"]``; with one CP-SAT worker, at 100 x 20 and 500 x 100,
        never: it is for machines where CP-SAT has several). The search stops when CP-SAT proves
        the model optimal and the model ``settles`` the answer (exact and not pruned: a pruned
        model's optimum the search, over every feasible node, may still beat); CP-SAT is stopped
        when the search ends by the clock. Returns CP-SAT's result, the search's (state, stats)
        and its wall seconds.

        Why (2 cores, 500 x 100 in 10 s, seeds 0-4): one after the other, CP-SAT's 40 % of the
        time gives the bound and never a better placement than the hint, while the search runs on
        one core; alongside, the search has the whole time and CP-SAT one core for the bound."""
        import threading

        model_workers, threads = plan
        proved = threading.Event()
        offer = _Offer()
        box: dict[str, Any] = {}
        model_done = threading.Event()

        def run_model() -> None:
            try:
                box["result"] = full.solve(
                    self.seed, wall, None, model_workers, self.relative_gap,
                    on_solution=lambda found: offer.put(found, guarded_score(p, found, allowed)),
                )
                if box["result"].proved and settles:
                    proved.set()
            except BaseException as exc:  # noqa: BLE001 - raised again in the calling thread
                box["error"] = exc
            finally:
                model_done.set()

        model_thread = threading.Thread(target=run_model, name="cpsat-model", daemon=True)
        began = time.perf_counter()
        searched = None
        try:
            model_thread.start()  # inside: start() waits for the thread, and Ctrl-C may come then
            searched = self._lns(p, hint.copy(), cap, None, allowed, threads, stop=proved, offer=offer)
        finally:
            searched_s = time.perf_counter() - began
            # CP-SAT's own limit is the same cap; it is stopped here when the search met the cap
            # (its limit may be read a little late) or failed. After a stall of the search it
            # goes on to the cap: its bound, and a placement it may still find, are worth the time.
            started = model_thread.ident is not None  # (Ctrl-C may have come inside start())
            if started and (searched is None or time.perf_counter() >= cap):
                # Until CP-SAT's thread ends: before its search began (or its solver was made) a
                # stop does nothing.
                stop_until(lambda: full.solver is not None and full.solver.stop_search(), model_done, math.inf)
            if started:
                model_thread.join()
        if "error" in box:
            raise box["error"]
        searched[1]["alongside_cpsat"] = {"cpsat_workers": model_workers, "threads": threads}
        return box["result"], searched, searched_s

    # --- large-neighbourhood search ----------------------------------------------------------

    def _lns(
        self, p: Problem, state: ClusterState, wall_end: float, det_budget: float | None,
        allowed: np.ndarray | None = None, threads: int = 1, stop: Any = None, offer: _Offer | None = None,
    ) -> tuple[ClusterState, dict[str, Any]]:
        """Improve ``state``: repeatedly take the pods of a few nodes (and unplaced pods
        that fit there) out and place them again with an exact model over those nodes; keep the
        result when R improves (with ``allowed``, the guarded score: :func:`guarded_score`).
        Deterministic: a seeded choice of neighbourhoods and a budget in deterministic time
        (sub-model time plus a fixed charge per iteration). ``stopped`` reads
        "wall clock" when ``wall_end`` came first with deterministic budget left. On the wall
        clock alone (no ``det_budget``) with ``threads`` > 1: :meth:`_lns_parallel`. ``stop``
        (a threading.Event) set ends it ("model proved optimal": CP-SAT, run alongside, did);
        a placement in ``offer`` better than the current one replaces it (``adopted``)."""
        if threads > 1 and det_budget is None:
            return self._lns_parallel(p, state, wall_end, allowed, threads, stop, offer)
        rng = np.random.default_rng([self.seed, 7])
        current = guarded_score(p, state, allowed)
        k = min(LNS_START_NODES, p.num_nodes)
        used = 0.0
        stats = {"iterations": 0, "improvements": 0, "start_score": current, "stopped": "budget", "threads": 1,
                 "adopted": 0}
        stall = 0
        pools = _search_pools(p, allowed)
        # Without a deterministic budget the wall clock is the budget.
        wall_stop = "budget" if det_budget is None else "wall clock"
        while det_budget is None or used < det_budget:
            if time.perf_counter() >= wall_end:
                stats["stopped"] = wall_stop
                break
            if stop is not None and stop.is_set():
                stats["stopped"] = PROVED_ALONGSIDE
                break
            taken = offer.take(current) if offer is not None else None
            if taken is not None:
                state, current = taken
                stats["adopted"] += 1
                stall = 0
            stats["iterations"] += 1
            used += LNS_ITERATION_CHARGE
            nodes = _neighbourhood(p, state, pools, k, rng)
            on_nodes, unplaced = _lns_pods(p, state, pools.static, nodes, rng)
            try:
                sub = self._lns_model(p, state, nodes, on_nodes, unplaced, wall_end, allowed)
            except OutOfTime:
                stats["stopped"] = wall_stop
                break
            if sub is None:
                continue
            wall_left = wall_end - time.perf_counter()
            det = LNS_SUB_DETERMINISTIC_S if det_budget is None else min(LNS_SUB_DETERMINISTIC_S, det_budget - used)
            if wall_left <= 0:
                stats["stopped"] = wall_stop
                break
            if det <= 0:
                break
            res = sub.solve(int(rng.integers(2**31)), wall_left, det)
            used += res.deterministic_time
            stall += 1
            if res.state is not None:
                score = guarded_score(p, res.state, allowed)
                if score > current + POLISH_TOL:
                    state, current = res.state, score
                    stats["improvements"] += 1
                    stall = 0
            if res.status == "optimal" and sub.exact and k >= p.num_nodes and unplaced.size == np.count_nonzero(
                (state.assignment < 0) & pools.admitted
            ):
                stats["stopped"] = "whole problem solved"  # the last model was the whole problem
                break
            if stall >= LNS_MAX_STALL:
                stats["stopped"] = f"{LNS_MAX_STALL} iterations without improvement"
                break
            # Grow the neighbourhood while sub-models are solved to optimality, shrink otherwise.
            k = min(p.num_nodes, k + 1) if res.status == "optimal" else max(2, k - 1)
        stats.update(deterministic_time=used, end_score=current, last_nodes=k)
        return state, stats

    def _lns_model(
        self, p: Problem, state: ClusterState, nodes: np.ndarray, on_nodes: np.ndarray, unplaced: np.ndarray,
        wall_end: float, allowed: np.ndarray | None,
    ) -> PlacementModel | None:
        """The exact model of one neighbourhood: the pods on ``nodes`` and ``unplaced``, placed
        again on top of the rest of ``state`` (each on the neighbourhood's nodes or its
        :data:`LNS_EXTRA_TARGETS` best others); None when no pod is left to place. Raises
        :class:`OutOfTime` past ``wall_end``."""
        pods = np.concatenate([on_nodes, unplaced]).astype(np.int64)
        if pods.size == 0:
            return None
        mask = np.zeros(p.num_nodes, dtype=bool)
        mask[nodes] = True
        base = state.copy()
        for w in on_nodes:
            base.remove(int(w))
        cand = np.stack([_lns_targets(p, base, int(w), mask, LNS_EXTRA_TARGETS, allowed) for w in pods])
        keep = cand.any(axis=1) | (state.assignment[pods] >= 0)
        pods, cand = pods[keep], cand[keep]
        if pods.size == 0:
            return None
        return PlacementModel(
            p, base, pods, cand, self.exact_levels, state, self.cardinality_cuts, deadline=wall_end, allowed=allowed,
        )

    def _lns_parallel(
        self, p: Problem, state: ClusterState, wall_end: float, allowed: np.ndarray | None, threads: int,
        stop: Any = None, offer: _Offer | None = None,
    ) -> tuple[ClusterState, dict[str, Any]]:
        """:meth:`_lns` on the wall clock with ``threads`` neighbourhoods solved at once (CP-SAT
        releases the GIL while it solves; the sequential search left every core but one idle
        after the whole-problem model). Neighbourhoods in flight have disjoint nodes and pods.
        A result is merged into the current placement only when no node it touches (its
        neighbourhood's, and those its pods go to) was changed by a result accepted since it
        was taken (a per-node version), so it is feasible there as it was in its own model; it is
        kept when the true R improves (``conflicts`` counts the results set aside). Not
        reproducible: which result lands first depends on the machine."""
        import threading

        rng = np.random.default_rng([self.seed, 7])
        lock = threading.Lock()
        current = guarded_score(p, state, allowed)
        stats: dict[str, Any] = {
            "iterations": 0, "improvements": 0, "start_score": current, "stopped": "budget", "threads": threads,
            "conflicts": 0, "adopted": 0,
        }
        pools = _search_pools(p, allowed)
        version = np.zeros(p.num_nodes, dtype=np.int64)  # accepted results that touched each node
        busy_nodes = np.zeros(p.num_nodes, dtype=bool)
        busy_pods = np.zeros(p.num_workloads, dtype=bool)
        most_nodes = max(2, p.num_nodes // threads)  # so that every thread finds free nodes
        shared: dict[str, Any] = {"state": state, "current": current, "k": min(LNS_START_NODES, most_nodes),
                                  "stall": 0, "stop": None, "deterministic_time": 0.0}
        errors: list[BaseException] = []

        finished = [threading.Event() for _ in range(threads)]

        def work(done: threading.Event) -> None:
            try:
                while True:
                    with lock:
                        if shared["stop"] is not None:
                            return
                        if time.perf_counter() >= wall_end:
                            shared["stop"] = "budget"
                            return
                        if stop is not None and stop.is_set():
                            shared["stop"] = PROVED_ALONGSIDE
                            return
                        taken = offer.take(shared["current"]) if offer is not None else None
                        if taken is not None:  # every node may have changed: results in flight are set aside
                            shared["state"], shared["current"] = taken
                            version[:] += 1
                            stats["adopted"] += 1
                            shared["stall"] = 0
                        nodes = _neighbourhood(p, shared["state"], pools, shared["k"], rng, ~busy_nodes)
                        if nodes.size:
                            stats["iterations"] += 1
                            # Used outside the lock below without a copy: an accepted result
                            # replaces the shared state object (_lns_merge, an offer), never changes it.
                            snapshot = shared["state"]
                            on_nodes, unplaced = _lns_pods(p, snapshot, pools.static, nodes, rng, busy_pods)
                            seen = version.copy()
                            busy_nodes[nodes] = True
                            busy_pods[on_nodes] = True
                            busy_pods[unplaced] = True
                            seed = int(rng.integers(2**31))
                    if not nodes.size:  # every node is in another neighbourhood (a moment only)
                        time.sleep(0.001)
                        continue
                    res = None
                    try:
                        sub = self._lns_model(p, snapshot, nodes, on_nodes, unplaced, wall_end, allowed)
                        wall_left = wall_end - time.perf_counter()
                        if sub is not None and wall_left > 0:
                            res = sub.solve(seed, wall_left, LNS_SUB_DETERMINISTIC_S)
                    except OutOfTime:
                        pass
                    with lock:
                        busy_nodes[nodes] = False
                        busy_pods[on_nodes] = False
                        busy_pods[unplaced] = False
                        if res is None:
                            continue
                        shared["deterministic_time"] += res.deterministic_time
                        shared["stall"] += 1
                        if res.state is not None:
                            _lns_merge(p, shared, res.state, sub.pods, nodes, version, seen, allowed, stats)
                        if shared["stall"] >= LNS_MAX_STALL and shared["stop"] is None:
                            shared["stop"] = f"{LNS_MAX_STALL} iterations without improvement"
                        k = shared["k"]
                        shared["k"] = min(most_nodes, k + 1) if res.status == "optimal" else max(2, k - 1)
            except BaseException as exc:  # noqa: BLE001 - raised again in the calling thread
                with lock:
                    errors.append(exc)
                    shared["stop"] = "error"
            finally:
                done.set()

        pool = [threading.Thread(target=work, args=(finished[i],), name=f"cpsat-lns-{i}", daemon=True)
                for i in range(threads)]
        try:
            for t in pool:  # inside: start() waits for each thread, and Ctrl-C may come then
                t.start()
            for done in finished:  # Events, not Thread.join: see iro_fed.interrupt
                done.wait()
        except BaseException:  # Ctrl-C while waiting: the workers end after their current sub-model,
            with lock:  # before the interpreter may exit under a thread still in CP-SAT (an abort)
                shared["stop"] = "interrupted"
            for done in finished:
                done.wait(STOP_WAIT_S)
            raise
        for t in pool:
            t.join()
        if errors:
            raise errors[0]
        stats.update(stopped=shared["stop"] or "budget", deterministic_time=shared["deterministic_time"], end_score=shared["current"],
                     last_nodes=shared["k"])
        return shared["state"], stats


class _LpAlongside:
    """:meth:`~solvers.cpsat_model.PlacementModel.lp_bound` in a thread of its own, started with
    CP-SAT and the search run alongside it (where no time is left after them: the search runs to
    the cap). GLOP releases the GIL while it solves (0.48 of 0.63 s at 500 x 100; the rest builds
    the LP in Python), so it takes a core's share for that long. :meth:`finish` waits for it and,
    should it run past the cap or the caller be interrupted, stops it."""

    def __init__(self, model: PlacementModel, deadline: float) -> None:
        import threading

        self.bound: float | None = None
        self._solver: Any = None
        self._done = threading.Event()
        self._stop = threading.Event()

        def run() -> None:
            try:
                self.bound = model.lp_bound(deadline=deadline, on_solver=self._keep, stop=self._stop)
            except Exception:  # noqa: BLE001 - a bound only reports: none rather than a failed solve
                self.bound = None
            finally:
                self._done.set()

        threading.Thread(target=run, name="cpsat-lp-bound", daemon=True).start()

    def _keep(self, solver: Any) -> None:
        self._solver = solver

    def finish(self, wait_s: float) -> None:
        """Wait ``wait_s`` at most for the LP, then stop it (a solve that ended before the cap,
        CP-SAT having proved its optimum, or an interrupted caller: the process must not exit
        under a thread still in GLOP); GLOP's own time limit ends it by the cap."""
        if self._done.wait(wait_s):
            return
        self._stop.set()
        give_up = time.perf_counter() + STOP_WAIT_S
        while not self._done.is_set() and time.perf_counter() < give_up:
            solver = self._solver
            if solver is not None:  # again until it ends: a call just before Solve began is lost
                solver.InterruptSolve()
            self._done.wait(0.01)


class _Offer:
    """The best placement CP-SAT found while the search ran alongside it, for the search to take
    (thread-safe: put by CP-SAT's solution callback, taken by the search)."""

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self._state: ClusterState | None = None
        self._score = -math.inf

    def put(self, state: ClusterState, score: float) -> None:
        with self._lock:
            if score > self._score:
                self._state, self._score = state, score

    def take(self, above: float) -> tuple[ClusterState, float] | None:
        """The placement offered and its score when it beats ``above``, once; else None."""
        with self._lock:
            if self._state is None or self._score <= above + POLISH_TOL:
                return None
            state, self._state = self._state, None
            return state, self._score


def _search_threads(p: Problem, cores: int) -> int:
    """Neighbourhoods the search solves at once on ``cores``: at most :data:`LNS_MAX_THREADS`, and
    one where the nodes are too few to give each its own (fewer than :data:`LNS_PARALLEL_MIN_NODES`)."""
    return 1 if p.num_nodes < LNS_PARALLEL_MIN_NODES else max(1, min(LNS_MAX_THREADS, cores))


def _usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform says, else all)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        return os.cpu_count() or 1


def _lns_pods(
    p: Problem, state: ClusterState, static: np.ndarray, nodes: np.ndarray, rng: np.random.Generator,
    busy: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """A neighbourhood's pods: those on ``nodes``, and the unplaced ones that may run there (not
    ``busy``: in another neighbourhood), a seeded sample of them where all would pass
    :data:`LNS_MAX_PODS`."""
    mask = np.zeros(p.num_nodes, dtype=bool)
    mask[nodes] = True
    on_nodes = np.flatnonzero(mask[np.maximum(state.assignment, 0)] & (state.assignment >= 0))
    unplaced = np.flatnonzero((state.assignment < 0) & static[:, mask].any(axis=1))
    if busy is not None:
        unplaced = unplaced[~busy[unplaced]]
    room = max(0, LNS_MAX_PODS - on_nodes.size)
    if unplaced.size > room:
        unplaced = np.sort(rng.choice(unplaced, size=room, replace=False))
    return on_nodes, unplaced


def _lns_merge(
    p: Problem, shared: dict[str, Any], found: ClusterState, pods: np.ndarray, nodes: np.ndarray,
    version: np.ndarray, seen: np.ndarray, allowed: np.ndarray | None, stats: dict[str, Any],
) -> None:
    """Merge a neighbourhood's result ``found`` (its ``pods``, taken from ``nodes``) into
    ``shared["state"]`` when no node it touches changed since its snapshot (``seen``) and the
    true R (guarded score) improves; the caller holds the lock."""
    state = shared["state"]
    to = found.assignment[pods]
    touched = np.union1d(nodes, to[to >= 0])
    if (version[touched] != seen[touched]).any():
        stats["conflicts"] += 1
        return
    if np.array_equal(to, state.assignment[pods]):
        return  # the same placement (cards aside): nothing to gain
    merged = state.copy()
    for w in pods:
        if merged.assignment[w] >= 0:
            merged.remove(int(w))
    for w, n in zip(pods, to, strict=True):
        if n >= 0:
            merged.place(int(w), int(n), found.gpu_cards.get(int(w)))
    score = guarded_score(p, merged, allowed)
    if score > shared["current"] + POLISH_TOL:
        shared["state"], shared["current"] = merged, score
        version[touched] += 1
        stats["improvements"] += 1
        shared["stall"] = 0


@dataclass(frozen=True)
class _SearchPools:
    """What the search draws its neighbourhoods from: each pod's statically admitted nodes
    (``static``, ``[W, N]``) and whether it has any (``admitted``, ``[W]``: read every step, so
    not reduced from ``static`` each time), each domain's nodes, and per pod the best
    :func:`_pair_values` over its admitted nodes (``best_value``), against which a placed pod's
    regret is read."""

    static: np.ndarray
    admitted: np.ndarray
    domains: list[np.ndarray]
    best_value: np.ndarray
    allowed: np.ndarray | None
    #: Whether regret neighbourhoods are drawn: only where every node is on at the start. Where
    #: nodes may power on or off, draining them is worth more than a pod's latency or carbon, and
    #: a quarter of the neighbourhoods spent on regret lowered R (500 x 100 with half the nodes
    #: empty, seeds 0-5, 10 s: -0.086 summed alongside, -0.026 with ``deterministic``).
    regret: bool


def _pair_values(p: Problem, pods: np.ndarray, nodes: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
    """:func:`~iro_fed.objective.pair_values` of the (broadcast) pairs, less the guard's penalty
    on the pairs ``allowed`` ranks last."""
    value = pair_values(p, pods, nodes)
    if allowed is not None:
        value = value - guard_penalty(p) * ~allowed[pods, nodes]
    return value


def _search_pools(p: Problem, allowed: np.ndarray | None = None) -> _SearchPools:
    static = np.stack([static_mask(p, w) for w in range(p.num_workloads)])
    regret = bool(ClusterState(p).on.all())
    best = np.full(p.num_workloads, -np.inf)
    if p.num_nodes:
        # Once per group of identical pods (the same values, admitted nodes and guard row: 182
        # groups for 1,000 pods at 1000 x 5000: 0.02 s, 0.13 s pod by pod), in chunks: [W, N] floats at
        # 1000 x 5000 are 40 MB.
        members = pod_groups(p, np.arange(p.num_workloads))
        reps = np.array([int(m[0]) for m in members], dtype=np.int64)
        nodes = np.arange(p.num_nodes)
        for start in range(0, reps.size, REGRET_CHUNK):
            chunk = reps[start : start + REGRET_CHUNK]
            value = _pair_values(p, chunk[:, None], nodes[None, :], allowed)
            for m, top in zip(members[start : start + REGRET_CHUNK], np.where(static[chunk], value, -np.inf).max(axis=1),
                              strict=True):
                best[m] = top
    domains = [np.flatnonzero(p.node_domain == d) for d in range(len(p.domains))]
    return _SearchPools(static, static.any(axis=1), domains, best, allowed, regret)


def _lns_targets(
    p: Problem, base: ClusterState, w: int, mask: np.ndarray, extra: int, allowed: np.ndarray | None = None
) -> np.ndarray:
    """Where a freed pod may go in a neighbourhood's model: the neighbourhood's nodes, and its
    ``extra`` best other nodes that are on, by marginal gain (:func:`guarded_gain` with
    ``allowed``), where it fits now (so that a pod can leave the neighbourhood to make room, a
    chain of moves that nodes-only neighbourhoods cannot make)."""
    fits = feasible_nodes(base, w)
    targets = fits & mask
    # Only nodes already on: powering one on outside the neighbourhood is rarely worth its cost,
    # and each such node brings a power-on variable and U's levels into the model (consolidation
    # problems: 14-23 per model, most stopped by their time limit unsolved, so the neighbourhoods
    # shrank to 2 nodes; with on nodes alone, 500 x 100 all empty went R -0.192 -> -0.025 / -0.048).
    outside = np.flatnonzero(fits & ~mask & base.on)
    if extra > 0 and outside.size:
        if outside.size > extra:
            outside = outside[np.argsort(-guarded_gain(p, base, w, outside, allowed), kind="stable")[:extra]]
        targets[outside] = True
    return targets


def _neighbourhood(
    p: Problem, state: ClusterState, pools: _SearchPools, k: int, rng: np.random.Generator,
    available: np.ndarray | None = None,
) -> np.ndarray:
    """``k`` nodes to re-optimize: around an unplaced pod (nodes it may run on), within one
    domain, anywhere, or around a placed pod with regret (:func:`_regret_nodes`), chosen in turn
    by the seeded generator; only ``available`` nodes when given (those in no other
    neighbourhood; fewer than ``k`` where fewer are left)."""
    kind = int(rng.integers(4 if pools.regret else 3))
    if kind == 3:
        nodes = _regret_nodes(p, state, pools, k, rng, available)
        if nodes is not None:
            return nodes
        kind = 2
    unplaced = np.flatnonzero((state.assignment < 0) & pools.admitted) if kind == 0 else np.empty(0, np.int64)
    if kind == 0 and unplaced.size:
        u = int(rng.choice(unplaced))
        pool = np.flatnonzero(pools.static[u])
    elif kind == 1:
        pool = pools.domains[int(rng.integers(len(pools.domains)))]
        if pool.size == 0:
            pool = np.arange(p.num_nodes)
    else:
        pool = np.arange(p.num_nodes)
    if available is not None:
        pool = pool[available[pool]]
        if pool.size == 0:
            pool = np.flatnonzero(available)
    return np.sort(rng.choice(pool, size=min(k, pool.size), replace=False))


def _regret_nodes(
    p: Problem, state: ClusterState, pools: _SearchPools, k: int, rng: np.random.Generator,
    available: np.ndarray | None = None,
) -> np.ndarray | None:
    """Placed pods drawn in proportion to their regret (how much more a pod's latency and dynamic
    carbon, :func:`_pair_values`, would be worth on its best admitted node than where it is): the
    nodes of up to ``k // 2`` of them, and the other places drawn from the nodes, already on, where
    the first pod drawn is worth most (the best :data:`REGRET_POOL` times as many as there are
    places left). The nodes a pod must reach to gain are
    usually full of pods that would lose little elsewhere (the benchmark's 500 x 100: GPU pods
    without a user region on az-1, where the LP puts the EU pods), and a neighbourhood that holds
    both ends, several of each, lets the model swap them (within a domain or at random they rarely
    meet). None when no placed pod has regret (or, with ``available``, none on an available node),
    or the first has no better node that is on. Drawn only where every node is on at the start
    (:attr:`_SearchPools.regret`). The benchmark's problems, 10 s on 2 cores, R summed before ->
    after: 500 x 100 (seeds 0-2) -2.0725 -> -2.0648 alongside, -2.1307 -> -2.0701 with
    ``deterministic``; 100 x 20 (seeds 0-2) -1.8768 -> -1.8695 alongside; 1000 x 500 (seeds
    0-1) -1.2963 -> -1.2941 (a version with one regret pod's node: -2.0653, -2.1065, -1.8690,
    -1.2971)."""
    a = state.assignment
    placed = np.flatnonzero(a >= 0)
    if available is not None:
        placed = placed[available[a[placed]]]
    if placed.size == 0 or k < 2:
        return None
    regret = pools.best_value[placed] - _pair_values(p, placed, a[placed], pools.allowed)
    keep = regret > REGRET_MIN
    if not keep.any():
        return None
    placed, regret = placed[keep], regret[keep]
    half = max(1, k // 2)
    drawn = placed[rng.choice(placed.size, size=min(placed.size, REGRET_OVERDRAW * half), replace=False, p=regret / regret.sum())]
    first = int(drawn[0])
    here = list(dict.fromkeys(int(n) for n in a[drawn]))[:half]  # distinct nodes, in draw order
    # Nodes already on only: an off node's value leaves out its power-on, and its power-on
    # variable and U's levels make the model slow (as for the targets, :func:`_lns_targets`).
    better = np.flatnonzero(pools.static[first] & state.on)
    if available is not None:
        better = better[available[better]]
    better = better[~np.isin(better, here)]
    value = _pair_values(p, np.full(better.size, first), better, pools.allowed)
    mine = float(_pair_values(p, np.array([first]), a[[first]], pools.allowed)[0])
    better, value = better[value > mine], value[value > mine]
    if better.size == 0:
        return None
    need = k - len(here)
    better = better[np.argsort(-value, kind="stable")][: REGRET_POOL * need]
    picked = rng.choice(better, size=min(need, better.size), replace=False)
    return np.sort(np.r_[here, picked].astype(np.int64))


def _not_reached(state: ClusterState, unreached: list[int], weighed: np.ndarray) -> list[int]:
    """The pods of ``unreached`` (the hint had not reached them) still unplaced in ``state`` that no
    polish weighed (``weighed``, from :func:`improve`). A pod a polish weighed and left out is R's
    choice: a caller placing it (time-budget's ``then``) would lower R."""
    return [w for w in unreached if state.assignment[w] < 0 and not weighed[w]]


def _prune(
    problem: Problem, feas: np.ndarray, hint_state: ClusterState | None, limit: int, deadline: float | None = None,
    allowed: np.ndarray | None = None,
) -> np.ndarray:
    """Per pod, the hint's node and the ``limit`` best nodes by the objective's marginal gain
    (:func:`guarded_gain` with ``allowed``) against the hint's final cluster with the pod taken
    out (nodes it still fits there first, then nodes that fit only the initial cluster). Raises
    :class:`OutOfTime` past ``deadline``."""
    p = problem
    st = hint_state.copy() if hint_state is not None else ClusterState(p)
    out = np.zeros_like(feas)
    for w in range(p.num_workloads):
        check_deadline(deadline)
        row = feas[w]
        if row.sum() <= limit:
            out[w] = row
            continue
        n0 = int(st.assignment[w])
        cards0 = st.gpu_cards.get(w, ())
        if n0 >= 0:
            st.remove(w)
        score = guarded_gain(p, st, w, None, allowed)
        score = np.where(feasible_nodes(st, w), score, score - 1e6)
        score = np.where(row, score, -np.inf)
        top = np.argpartition(-score, limit - 1)[:limit]
        out[w, top] = row[top]
        if n0 >= 0:
            st.place(w, n0, cards0)
            out[w, n0] = True
    return out
