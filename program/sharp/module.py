"""SHARP as a DSPy module: its predictors, and the live source of its rounds (it reads with the LM)."""

from __future__ import annotations

import time

import dspy

from program.reading.answers import clean_answer
from program.reading.confidence import TOP_LOGPROBS
from program.reading.evidence import EvidencePool, format_evidence
from program.reading.generation import answer_from_evidence, record_confidence
from program.reading.parsing import items
from program.retrieval.base import Retriever
from program.sharp.chain import branch_round, chain_round, union_read
from program.sharp.critic import output_fields, read_critique
from program.sharp.forms import options, question_form, rule_checks, rule_sub_questions
from program.sharp.loop import SYSTEM, conclude, play
from program.sharp.policy import Policy, SharpConfig
from program.sharp.rounds import Action, Read, Round, Run
from program.sharp.sentences import select_sentences, split_sentences
from program.sharp.spans import names_title
from program.signatures import (
    ComposeAnswer,
    CritiqueAnswer,
    DecomposeQuestion,
    GenerateAnswer,
    PlanHops,
    ReadSecondHop,
)
from program.tracing import Tracer, traced
from program.types import Passage

__all__ = ["SharpRAG"]


class SharpRAG(dspy.Module):
    """The self-correcting multi-hop program, and the live source of its rounds. Predictors: planner,
    critic, generator, composer, focuser, hop_planner."""

    SYSTEM = SYSTEM
    # the composer and the focused reader write answers with the generator's LM
    ROLE_MAP = {"composer": "generator", "focuser": "generator", "hop_planner": "planner"}

    def __init__(self, retriever: Retriever, config: SharpConfig | None = None):
        super().__init__()
        self.config = config or SharpConfig()
        self.retriever = retriever
        self.planner = dspy.Predict(DecomposeQuestion)
        self.critic = dspy.Predict(CritiqueAnswer)
        self.generator = dspy.Predict(GenerateAnswer)
        self.composer = dspy.Predict(ComposeAnswer)
        self.focuser = dspy.Predict(ReadSecondHop)
        self.hop_planner = dspy.Predict(PlanHops)

    # ---- the live source ------------------------------------------------------------------------------
    def read(self, run: Run, action: Action, policy: Policy, tr: Tracer) -> Round:
        """Answer ``action`` for ``run`` with the LM; the round records its steps, calls and seconds."""
        n_steps, n_calls, t0 = len(tr.steps), len(tr.ledger.records), time.perf_counter()
        round_no = len(run.rounds)
        make = {"draft": self._draft, "retrieve": self._retrieve, "compare": self._compare, "focus": self._focus,
                "chain": self._chain}  # fmt: skip
        rnd = make[action](run, tr, round_no, policy)
        rnd.round = round_no
        rnd.steps, rnd.calls = tr.steps[n_steps:], _calls(tr, n_calls)
        rnd.seconds = round(time.perf_counter() - t0, 4)
        return rnd

    def critique(self, run: Run, rnd: Round, tr: Tracer) -> dict | None:
        cfg = self.config
        n_steps, n_calls = len(tr.steps), len(tr.ledger.records)
        pred, step = tr.call("critic", self.critic, {"question": run.question[:200], "n_passages": len(rnd.evidence)},
                             adapter=cfg.structured_adapter, config=cfg.critic_lm_config(), question=run.question,
                             evidence=format_evidence(rnd.evidence, cfg.passage_chars), draft_answer=rnd.answer)  # fmt: skip
        crit = read_critique(output_fields(pred, step), pred is not None, getattr(pred, "logprobs", None))
        step.update(round=rnd.round, draft_answer=rnd.answer, **crit)
        rnd.critique, rnd.critic_steps, rnd.critic_calls = crit, tr.steps[n_steps:], _calls(tr, n_calls)
        return crit

    def spent(self, policy: Policy, tr: Tracer) -> str | None:
        return tr.exhausted()

    # ---- rounds ----------------------------------------------------------------------------------------
    def _search(self, query: str, k: int, run: Run, tr: Tracer, round_no: int) -> list[Passage]:
        passages = self.retriever.retrieve(query, k)
        known = {p.id for p in run.rounds[0].evidence} if run.rounds else set()  # new: not in the draft's evidence
        tr.add("retriever", round=round_no, k=k, queries=[query], retrieved_ids=[[p.id for p in passages]],
               new_ids=[p.id for p in passages if p.id not in known])  # fmt: skip
        self._note_query(run, query)
        return passages

    @staticmethod
    def _note_query(run: Run, query: str) -> None:
        if query not in run.queries:
            run.queries.append(query)

    def _read(
        self,
        q: str,
        evidence: list[Passage],
        tr: Tracer,
        round_no: int,
        focus: str | None = None,
        chars: int | None = None,
    ) -> Read:
        """One read of ``q`` over ``evidence`` (each passage cut at ``chars``, else ``passage_chars``): the generator's,
        or the focuser's about the entity ``focus``."""
        cfg = self.config
        predictor, role, inputs = (self.generator, "generator", {}) if focus is None else (
            self.focuser, "focuser", {"intermediate": focus})  # fmt: skip
        answer, cited = answer_from_evidence(predictor, q, evidence, chars or cfg.passage_chars, tr, role=role,
                                             adapter=cfg.generator_adapter, confidence=True, inputs=inputs)  # fmt: skip
        step = tr.steps[-1]
        step["round"] = round_no
        top = step.get("answer_top")
        return Read(q, answer, list(evidence), cited, step.get("answer_confidence"),
                    [(str(t), float(lp)) for t, lp in top] if top else None)  # fmt: skip

    def _draft(self, run: Run, tr: Tracer, round_no: int, policy: Policy) -> Round:
        """The ranked read: the top passages, or the sentences the selector keeps of them (the round keeps
        the whole passages as its evidence: what the answer is judged and written against)."""
        cfg = self.config
        if cfg.evidence == "passages":
            evidence = self._search(run.question, cfg.k_schedule[0], run, tr, round_no)
            return Round("draft", read=self._read(run.question, evidence, tr, round_no))
        passages = self._search(run.question, cfg.sentence_passages, run, tr, round_no)
        shown = select_sentences(run.question, passages, cfg.selector, cfg.sentence_budget)  # type: ignore[arg-type]
        read = self._read(run.question, shown, tr, round_no)
        tr.steps[-1]["sentences"] = sum(len(split_sentences(p.text)) for p in shown)
        read.evidence = list(passages)
        return Round("draft", read=read)

    @staticmethod
    def _entity_of(run: Run) -> str | None:
        """The entity the draft's reader named (not a yes/no, not "unknown"): what a retrieval repair adds to
        its search and a focused read goes through. The reader's own words, whatever the policy settled, so a
        recorded repair serves every policy."""
        draft = run.rounds[0].read if run.rounds else None
        answer = clean_answer(draft.answer, run.question) if draft else ""
        return answer if answer.lower() not in ("", "unknown", "yes", "no") else None

    def _retrieve(self, run: Run, tr: Tracer, round_no: int, policy: Policy) -> Round:
        """Search "QUESTION DRAFT" at the widest k, re-read the best passages of the searches so far."""
        cfg, q = self.config, run.question
        first = self._entity_of(run)
        query = f"{q} {first}" if first else q
        pool = EvidencePool()
        pool.add(q, run.rounds[0].evidence)
        pool.add(query, self._search(query, cfg.k_schedule[-1], run, tr, round_no))
        evidence = pool.select(max(cfg.evidence_cap, cfg.k_schedule[0]), "score")
        return Round("retrieve", read=self._read(q, evidence, tr, round_no), query=query)

    def _focus(self, run: Run, tr: Tracer, round_no: int, policy: Policy) -> Round:
        """Re-read for the second hop: the draft's entity's own passages first, the question restated
        through that entity (ReadSecondHop)."""
        cfg, q = self.config, run.question
        entity = self._entity_of(run)
        if entity is None:
            return Round("focus", fallback="the draft named no entity to read through")
        draft = run.rounds[0].evidence
        own = [p for p in draft if names_title(entity, p)]
        found = self._search(entity, cfg.sub_k, run, tr, round_no)
        seen: dict[str, Passage] = {}
        for p in [*own, *found, *draft]:
            seen.setdefault(p.id, p)
        evidence = list(seen.values())[: cfg.evidence_cap]
        return Round("focus", read=self._read(q, evidence, tr, round_no, focus=entity), query=entity)

    def _compare(self, run: Run, tr: Tracer, round_no: int, policy: Policy) -> Round:
        """The planner names the entities (the question's options where it has them) and writes one
        sub-question each (a choice of two dates the question names is planned by rule, with no LM call:
        program.sharp.forms.rule_sub_questions); each is read single-hop (the loop has the composer answer from
        the values only where the policy needs it: :func:`needs_composer`)."""
        cfg, q = self.config, run.question
        named = options(q)
        ruled = rule_sub_questions(q, named)
        if ruled is not None:  # a choice of two dates the question names: no LM call to plan it
            step = tr.add("planner", round=round_no, by_rule=True, lm_calls=0)
            fields: dict = {"entities": named, "sub_questions": ruled}
        else:
            pred, step = tr.call("planner", self.planner, {"question": q[:200]}, adapter=cfg.structured_adapter,
                                 config={"max_tokens": cfg.planner_max_tokens}, question=q, options=named)  # fmt: skip
            fields = output_fields(pred, step)
        asked = " ".join(q.lower().split())
        subs = [s for s in dict.fromkeys(items(fields.get("sub_questions"))) if " ".join(s.lower().split()) != asked]
        subs = subs[: cfg.max_sub_questions]
        checks = rule_checks(q, named) if len(subs) < 2 and len(named) == 2 else None
        if checks:  # the planner could not plan the choice: a check per option, written from the question
            subs = checks
            step["checks_by_rule"] = True
        entities = named or items(fields.get("entities"))[: len(subs)]
        step.update(round=round_no, entities=entities, sub_questions=subs)
        rnd = Round("compare", entities=entities, sub_questions=subs, planned=ruled is None and not named)
        if len(subs) < 2:
            rnd.fallback = f"the planner wrote {len(subs)} sub-question(s): the draft stands"
        elif run.form == "comparison" and len(entities) != len(subs):
            rnd.fallback = f"{len(entities)} entities for {len(subs)} sub-questions: the draft stands"
        if rnd.fallback:
            step["fallback"] = rnd.fallback
            return rnd
        if len(entities) != len(subs):  # a yes/no question: the values decide, not the names
            rnd.entities = subs
        for sub in subs:
            rnd.values.append(self._read(sub, self._search(sub, cfg.sub_k, run, tr, round_no), tr, round_no))
        return rnd

    def _chain(self, run: Run, tr: Tracer, round_no: int, policy: Policy) -> Round:
        """The bridge hop by hop: a checked plan, each hop searched and read alone (program/sharp/chain.py)."""
        return chain_round(self, run, tr, round_no)

    def branch(self, run: Run, rnd: Round, tr: Tracer) -> Round | None:
        """A chain's second branch (program/sharp/chain.py branch_round), its steps, calls and seconds its own,
        kept on ``rnd``."""
        n_steps, n_calls, t0 = len(tr.steps), len(tr.ledger.records), time.perf_counter()
        alt = branch_round(self, run, rnd, tr)
        if alt is not None:
            alt.steps, alt.calls = tr.steps[n_steps:], _calls(tr, n_calls)
            alt.seconds = round(time.perf_counter() - t0, 4)
        rnd.branch, rnd.branch_tried = alt, True
        return alt

    def compose(self, run: Run, rnd: Round, tr: Tracer) -> Read:
        """The composer's answer from a comparison's values, or a chain's read of the question over its hops'
        passages; its steps, calls and seconds kept apart on the round (a policy that decides in code, or
        answers with the chain's last hop, does not make this call)."""
        n_steps, n_calls, t0 = len(tr.steps), len(tr.ledger.records), time.perf_counter()
        if rnd.action == "chain":
            read = union_read(self, run, rnd, tr)
        else:
            read = self._compose(run.question, rnd, tr, rnd.round)
        rnd.compose_steps, rnd.compose_calls = tr.steps[n_steps:], _calls(tr, n_calls)
        rnd.compose_seconds = round(time.perf_counter() - t0, 4)
        return read

    def _compose(self, q: str, rnd: Round, tr: Tracer, round_no: int) -> Read:
        cfg = self.config
        facts = [f"{s} -> {v.answer}" for s, v in zip(rnd.sub_questions, rnd.values)]
        pred, step = tr.call("composer", self.composer, {"question": q[:200], "facts": len(facts)},
                             adapter=cfg.generator_adapter, question=q, facts=facts,
                             config={"max_tokens": cfg.compose_max_tokens, "logprobs": True,
                                     "top_logprobs": TOP_LOGPROBS})  # fmt: skip
        record_confidence(step, pred)
        answer = clean_answer(output_fields(pred, step).get("answer"), q) or "unknown"
        step.update(round=round_no, facts=facts, answer=answer)
        top = step.get("answer_top")
        return Read(q, answer, [], [], step.get("answer_confidence"),
                    [(str(t), float(lp)) for t, lp in top] if top else None)  # fmt: skip

    # ---- a question ---------------------------------------------------------------------------------------
    def run(self, q: str, tr: Tracer) -> Run:
        """The loop over this program's live rounds, as the config's policy says."""
        return play(q, question_form(q), self, self.config, tr)

    def forward(self, question: str) -> dspy.Prediction:
        cfg = self.config
        with traced(question, cfg.max_question_chars, cfg.budget) as (q, tr):
            run = self.run(q, tr)
            return conclude(run, cfg, tr)


def _calls(tr: Tracer, mark: int) -> list[dict]:
    return [r.to_dict() for r in tr.ledger.records[mark:]]
