"""The chain: a bridge answered hop by hop, each hop searched and read alone (the ``chain`` repair).

1. **Plan.** The question's single hops (program/sharp/plans.py): by rule where it is templated (no LM call),
   else by the planner LM (``PlanHops``); Python checks every plan, and a plan that fails is not run (the
   round has no answer and says why: the draft stands).
2. **Hop.** Each hop's question, with the earlier answers written in for #1, #2, is searched (``sub_k``
   passages) together with a title lookup of the previous hop's answer (or of the entity a rule plan starts
   from): the entity's own passage, where the retriever can look titles up (the evidence ranker's pool can).
   The generator reads the hop alone: the entity's own passage alone first, where it was found; the hop's
   passages together where that read finds no answer. Its answer must be a span of the hop's passages (written as the
   passage writes it, the closest span where the reader reworded it). A hop shows ``hop_passage_chars`` of each
   passage where set (the asked fact of an entity's passage often stands past the first 600 characters). A place
   hop answered with a date is asked once more for the kind of place ("In which city was X born?": the 1.5B reader
   reads the date first in a person's passage). A hop that finds nothing, answers nothing, the wrong kind of thing for its question, off
   its passages, or with the entity it asks about stops the chain (traced).
3. **Beam.** Where the policy carries a second hop-1 answer (``chain_beam``: hop 1's first-token probability at or
   below it), hop 1 is read again over its passages that do not hold the first answer, and that answer is
   carried through the later hops (:func:`branch_round`, read on demand as the union read is); the loop keeps the
   branch the gate trusts more (a finished chain before one a hop stopped).
4. **Answer.** The last hop's answer; or, where the policy says ``chain_answer: union``, one read of the whole
   question over the union of the hops' passages (the IRCoT way), made by :func:`union_read` on demand, as the
   composer is for a comparison.

The chain's round is judged like every round (its gate features: program/sharp/gate.py).
"""

from __future__ import annotations

from typing import Any, Protocol

from program.reading.parsing import items
from program.sharp.answer_types import asked_type, mismatch
from program.sharp.critic import output_fields
from program.sharp.plans import Plan, check_plan, loops_back, reworded, rule_plan, substitute
from program.sharp.rounds import Read, Round, Run
from program.sharp.spans import closest_span, is_span
from program.tracing import Tracer
from program.types import Passage

__all__ = ["branch_round", "chain_round", "hop1_p", "hop_answer", "read_hop", "union_evidence", "union_read"]


class ChainReader(Protocol):
    """What the chain needs of the program: its config, retriever, hop planner and single reads."""

    config: Any
    retriever: Any
    hop_planner: Any

    def _read(
        self,
        q: str,
        evidence: list[Passage],
        tr: Tracer,
        round_no: int,
        focus: str | None = None,
        chars: int | None = None,
    ) -> Read: ...

    def _note_query(self, run: Run, query: str) -> None: ...


def plan_for(reader: ChainReader, question: str, tr: Tracer, round_no: int) -> tuple[Plan, dict]:
    """The question's plan (by rule, else by the planner LM) and the planner step that traces it."""
    ruled = rule_plan(question)
    if ruled is not None:
        step = tr.add("planner", round=round_no, by_rule=True, lm_calls=0)
        return ruled, step
    cfg = reader.config
    pred, step = tr.call("planner", reader.hop_planner, {"question": question[:200], "plan": "hops"},
                         adapter=cfg.structured_adapter, config={"max_tokens": cfg.planner_max_tokens},
                         question=question)  # fmt: skip
    return Plan(tuple(items(output_fields(pred, step).get("hops"))), "planner"), step


def hop_answer(read: Read, hop_question: str, entity: str | None = None) -> tuple[str | None, str]:
    """A hop's answer as its passages write it, or (None, why the chain stops there): it answered nothing, the
    wrong kind of thing (a date for "where"), off its passages, or the entity it asks about (a loop)."""
    answer = read.answer.strip()
    if answer.lower() in ("", "unknown"):
        return None, "answered nothing"
    if mismatch(hop_question, answer):
        return None, f"{answer!r} is not what its question asks for ({asked_type(hop_question)})"
    if not is_span(answer, read.evidence):
        span = closest_span(answer, read.evidence)
        if span is None:
            return None, f"{answer!r} is not a span of its passages"
        answer = span
    if loops_back(answer, hop_question, entity):
        return None, f"{answer!r} is the entity its question asks about (a loop)"
    return answer, ""


def _hop_search(
    reader: ChainReader, query: str, names: list[str], tr: Tracer, round_no: int, hop: int
) -> tuple[list, list[str]]:
    """A hop's passages and the ids of those titled by ``names``: the search of its question, the titled
    passages joined where the retriever looks titles up (``with_titles``), else the search alone."""
    k = reader.config.sub_k
    lookup = getattr(reader.retriever, "with_titles", None)
    if names and lookup is not None:
        passages, titled = lookup(query, k, names)
    else:
        passages, titled = reader.retriever.retrieve(query, k), []
    tr.add("retriever", round=round_no, hop=hop, k=k, queries=[query], retrieved_ids=[[p.id for p in passages]],
           titled=list(names) if lookup is not None else [], titled_ids=titled)  # fmt: skip
    return passages, list(titled)


def _read_checked(
    reader: ChainReader,
    query: str,
    evidence: list[Passage],
    entity: str | None,
    tr: Tracer,
    round_no: int,
    hop: int,
    **mark: Any,
) -> tuple[Read, str | None, str]:
    """``query`` read over ``evidence``, its answer checked (:func:`hop_answer`); a place hop answered with a date
    asked once more, for the kind of place."""
    chars = reader.config.hop_passage_chars  # None: as every read (passage_chars)
    read = reader._read(query, evidence, tr, round_no, chars=chars)
    tr.steps[-1].update(hop=hop, **mark)
    answer, problem = hop_answer(read, query, entity)
    again = reworded(query) if answer is None and mismatch(query, read.answer) else None
    if again is not None:  # a date for "where": asked once more, for the kind of place
        read = reader._read(again, evidence, tr, round_no, chars=chars)
        tr.steps[-1].update(hop=hop, reworded=True, **mark)
        answer, problem = hop_answer(read, query, entity)
    return read, answer, problem


def read_hop(
    reader: ChainReader, query: str, names: list[str], tr: Tracer, round_no: int, hop: int, **mark: Any
) -> tuple[Read | None, str | None, str]:
    """One hop: ``query`` searched with the titled passages of ``names`` (the entity it asks about) and read;
    (the read, its answer as its passages write it or None, why none). Where the entity's own passage was found,
    it is read alone first (the 1.5B reader answers from a neighbour's passage a quarter of the time when given
    three: "the father of Yuen Woo-ping" read as the father named in the next passage); the hop's passages all
    together where that read finds no answer."""
    passages, titled = _hop_search(reader, query, names, tr, round_no, hop)
    if not passages:
        return None, None, "the search found nothing"
    entity = names[0] if names else None
    own = [p for p in passages if p.id in set(titled)][:1]
    if own and len(passages) > 1:
        read, answer, problem = _read_checked(reader, query, own, entity, tr, round_no, hop, own=True, **mark)
        if answer is not None:
            return read, answer, problem
    return _read_checked(reader, query, passages, entity, tr, round_no, hop, **mark)


def chain_round(reader: ChainReader, run: Run, tr: Tracer, round_no: int) -> Round:
    """The chain's round: its checked plan and one read a hop, as far as the hops hold (see the module)."""
    plan, step = plan_for(reader, run.question, tr, round_no)
    why = check_plan(plan.hops, run.question)
    step.update(round=round_no, hops=list(plan.hops), plan_by=plan.by, **({"refused": why} if why else {}))
    rnd = Round("chain", plan=plan.to_record())
    if why:
        rnd.fallback = f"plan refused: {why}: the draft stands"
        return rnd
    _follow(reader, run, plan, rnd, tr, round_no)
    return rnd


def _follow(reader: ChainReader, run: Run, plan: Plan, rnd: Round, tr: Tracer, round_no: int, **mark: Any) -> None:
    """Read ``plan``'s hops after those ``rnd`` has answered, one a hop, as far as they hold (into ``rnd``)."""
    for i, hop in enumerate(plan.hops[len(rnd.hop_answers) :], len(rnd.hop_answers) + 1):
        query = substitute(hop, rnd.hop_answers)
        names = [rnd.hop_answers[-1]] if rnd.hop_answers else [plan.entity] if plan.entity else []
        reader._note_query(run, query)
        read, answer, problem = read_hop(reader, query, names, tr, round_no, i, **mark)
        if read is not None:
            rnd.hops.append(read)
        if answer is None:
            rnd.fallback = f"hop {i}: {problem}: the draft stands"
            break
        rnd.hop_answers.append(answer)
    if rnd.fallback:
        tr.add("chain", round=round_no, stopped=rnd.fallback, hop_answers=list(rnd.hop_answers), **mark)


def hop1_p(rnd: Round) -> float:
    """How sure the chain's hop 1 is of its answer: its first token's probability (0 without log-probabilities:
    unsure)."""
    conf = rnd.hops[0].confidence if rnd.hops else None
    return float((conf or {}).get("first", 0.0))


def branch_round(reader: ChainReader, run: Run, rnd: Round, tr: Tracer) -> Round | None:
    """The chain's second branch (a beam of 2): hop 1 read again over its passages that do not hold its first
    answer, that answer checked as every hop's and carried through the later hops. None where hop 1 answered
    nothing or no other passage was found (then no LM call)."""
    if rnd.plan is None or not rnd.hop_answers:
        return None
    plan, first = Plan.from_record(rnd.plan), rnd.hop_answers[0]
    names = [plan.entity] if plan.entity else []
    passages, _ = _hop_search(reader, plan.hops[0], names, tr, rnd.round, 1)
    others = [p for p in passages if not is_span(first, [p])]
    if not others:
        tr.add("chain", round=rnd.round, beam=f"every hop-1 passage holds {first!r}: no second answer")
        return None
    alt = Round("chain", plan=rnd.plan, round=rnd.round)
    read, answer, problem = _read_checked(reader, plan.hops[0], others, plan.entity, tr, rnd.round, 1, beam=True)
    alt.hops.append(read)
    if answer is not None and answer.strip().lower() == first.strip().lower():
        answer, problem = None, f"{answer!r} again"
    if answer is None:
        alt.fallback = f"hop 1: {problem}: no second answer"
        tr.add("chain", round=rnd.round, stopped=alt.fallback, beam=True)
        return alt
    alt.hop_answers.append(answer)
    _follow(reader, run, plan, alt, tr, rnd.round, beam=True)
    return alt


def union_evidence(rnd: Round, cap: int) -> list[Passage]:
    """The hops' passages for one read of the whole question: each hop's best first, then its next, ...,
    no repeats, at most ``cap``."""
    out: dict[str, Passage] = {}
    depth = max((len(h.evidence) for h in rnd.hops), default=0)
    for rank in range(depth):
        for h in rnd.hops:
            if rank < len(h.evidence) and h.evidence[rank].id not in out and len(out) < cap:
                out[h.evidence[rank].id] = h.evidence[rank]
    return list(out.values())


def union_read(reader: ChainReader, run: Run, rnd: Round, tr: Tracer) -> Read:
    """The whole question read over the union of the chain's hop passages (the IRCoT way)."""
    return reader._read(run.question, union_evidence(rnd, reader.config.evidence_cap), tr, rnd.round)
