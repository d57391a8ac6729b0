"""The budget tree flattened for fair share, and Slurm's Fair Tree ranking over it.

Flat tuples indexed by node id (depth-first, siblings in config order) keep the hot
loops of a 5,000-user tree to list indexing. The ranking is Fair Tree
(slurm fair_tree.shtml): at every level siblings are sorted by Level FS = S/U, users
are ranked in pre-order, so an account ahead of its sibling puts *every* user under it
ahead of every user under the sibling, whatever the users' own numbers.
"""

from __future__ import annotations

import math
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from slurm_ml.model import BudgetTree

ORG, PROGRAM, PROJECT, USER = "org", "program", "project", "user"

#: Level FS values this close (relative) are a tie; S/U of equal ratios computed from
#: different numbers (2/4 vs 1/2 of the siblings) must not split on rounding.
_TIE_REL = 1e-9

Association = tuple[str, str]  # (project account, user)


@dataclass(frozen=True, slots=True, eq=False)
class FlatTree:
    """org -> programs -> projects -> users as parallel tuples; node 0 is the org."""

    paths: tuple[tuple[str, ...], ...]
    kinds: tuple[str, ...]
    accounts: tuple[str, ...]  # a user leaf carries its project's account
    users: tuple[str | None, ...]
    parents: tuple[int, ...]  # -1 for the org
    children: tuple[tuple[int, ...], ...]
    weights: tuple[float, ...]  # water-filling weight among siblings (a user: 1.0)
    level_shares: tuple[float, ...]  # weight / sum of sibling weights
    budget_shares: tuple[float, ...]  # product of level shares from the org down
    leaf_of: Mapping[Association, int]  # association -> user leaf
    assoc_at: Mapping[int, Association]  # user leaf -> association
    account_of: Mapping[str, int]  # account -> org/program/project node


#: id(tree) -> (tree, flat): the trees flattened last, found without hashing them
_FLAT_BY_ID: dict[int, tuple[BudgetTree, FlatTree]] = {}


def flatten(tree: BudgetTree) -> FlatTree:
    """The tree as flat tuples; cached because the daemon and the simulator ask every
    cycle. The same tree object is found by identity first: hashing a frozen tree of
    thousands of users (``lru_cache``'s key) costs more than the rest of a quiet cycle."""
    got = _FLAT_BY_ID.get(id(tree))
    if got is not None and got[0] is tree:
        return got[1]
    flat = _flatten(tree)
    if len(_FLAT_BY_ID) >= 8:
        _FLAT_BY_ID.clear()
    _FLAT_BY_ID[id(tree)] = (tree, flat)
    return flat


@lru_cache(maxsize=8)
def _flatten(tree: BudgetTree) -> FlatTree:
    paths: list[tuple[str, ...]] = []
    kinds: list[str] = []
    accounts: list[str] = []
    users: list[str | None] = []
    parents: list[int] = []
    children: list[list[int]] = []
    weights: list[float] = []
    level: list[float] = []
    budget: list[float] = []

    def add(path: tuple[str, ...], kind: str, user: str | None, parent: int, *,
            weight: float, share: float) -> int:
        account = path[-1] if user is None else path[-2]
        node = len(paths)
        paths.append(path)
        kinds.append(kind)
        accounts.append(account)
        users.append(user)
        parents.append(parent)
        children.append([])
        weights.append(weight)
        level.append(share)
        budget.append(share * (budget[parent] if parent >= 0 else 1.0))
        if parent >= 0:
            children[parent].append(node)
        return node

    root = add((tree.org,), ORG, None, -1, weight=1.0, share=1.0)
    prog_total = sum(p.weight for p in tree.programs)
    for prog in tree.programs:
        p_path = (tree.org, prog.name)
        p_node = add(p_path, PROGRAM, None, root, weight=prog.weight,
                     share=prog.weight / prog_total)
        proj_total = sum(j.weight for j in prog.projects)
        for proj in prog.projects:
            j_path = (*p_path, proj.name)
            j_node = add(j_path, PROJECT, None, p_node, weight=proj.weight,
                         share=proj.weight / proj_total)
            for user in proj.users:
                add((*j_path, user), USER, user, j_node, weight=1.0, share=1.0 / len(proj.users))
    leaf_of = {(accounts[n], u): n for n, u in enumerate(users) if u is not None}
    account_of = {accounts[n]: n for n, u in enumerate(users) if u is None}
    return FlatTree(
        paths=tuple(paths), kinds=tuple(kinds), accounts=tuple(accounts), users=tuple(users),
        parents=tuple(parents), children=tuple(tuple(c) for c in children),
        weights=tuple(weights), level_shares=tuple(level), budget_shares=tuple(budget),
        leaf_of=leaf_of, assoc_at={n: a for a, n in leaf_of.items()}, account_of=account_of,
    )


def level_fs(tree: FlatTree, usage: Sequence[float]) -> list[float]:
    """Fair Tree Level FS = S/U per node; U = own usage / siblings' total; inf with none.

    The org has no siblings: S = U = 1 once anything was used.
    """
    out = [math.inf] * len(usage)
    for node, kids in enumerate(tree.children):
        if node == 0 and usage[0] > 0:
            out[0] = 1.0
        total = sum(usage[k] for k in kids)
        for k in kids:
            if usage[k] > 0:
                out[k] = tree.level_shares[k] * total / usage[k]
    return out


def _tied(a: float, b: float) -> bool:
    return a == b or math.isclose(a, b, rel_tol=_TIE_REL)


def fair_tree_order(tree: FlatTree, lfs: Sequence[float]) -> list[list[int]]:
    """Every user leaf in Fair Tree order, as groups of tied leaves, best first.

    Siblings sort by Level FS (highest first, config order among equals); tied users
    share a group; tied accounts have their children merged before descending (as
    Slurm's fair_tree.c does), so that neither wins by config order alone.
    """
    groups: list[list[int]] = []

    def visit(siblings: list[int]) -> None:
        ordered = sorted(siblings, key=lfs.__getitem__, reverse=True)  # stable
        i = 0
        while i < len(ordered):
            j = i + 1
            while j < len(ordered) and _tied(lfs[ordered[i]], lfs[ordered[j]]):
                j += 1
            run = ordered[i:j]
            leaves = [n for n in run if tree.kinds[n] == USER]
            if leaves:
                groups.append(leaves)
            merged = [c for n in run if tree.kinds[n] != USER for c in tree.children[n]]
            if merged:
                visit(merged)
            i = j

    visit([0])
    return groups


def compress(order: Sequence[Sequence[Association]],
             ranked: Container[Association]) -> dict[Association, int]:
    """Dense ranks 1..N in Fair Tree order for the associations in ``ranked`` only.

    Slurm's Fair Tree ranks every user, active or not; only those with pending jobs need a
    band, and leaving the idle ones out keeps the SiteFactor range small.
    """
    out: dict[Association, int] = {}
    rank = 0
    for group in order:
        hit = [a for a in group if a in ranked]
        if hit:
            rank += 1
            for assoc in hit:
                out[assoc] = rank
    return out
