"""Reference point: one raw chat call per question (no DSPy prompt format), same retriever and evidence.

    python -m experiments.benchmarks.raw_reference [N]

Retrieves the hybrid top-5 for each of N seeded HotpotQA dev questions, asks the local 1.5B model
with a one-line "short answer only" system prompt, and prints one JSON line per question and the
EM / F1. Compare with `sharp eval --system vanilla --limit N --seed 0` to see what DSPy's prompt
format costs (or gains) on this model.
"""
import json, sys, time
from experiments.runtime import Runtime
from program.lm.local import get_session
from program.evidence import format_evidence
from program.answers import clean_answer
from optimize.metrics import exact_match, f1_score

n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
rt = Runtime()
exs = rt.examples("dev", n, 0)
ret = rt.retriever()
sess = get_session("local/qwen2.5-coder-1.5b")
out = []
em = f1 = 0
for ex in exs:
    q = ex.question
    golds = [ex.answer] + list(getattr(ex, "answer_aliases", []) or [])
    ev = ret.retrieve(q, 5)
    msgs = [{"role": "system", "content": "Answer the question using the passages. Reply with the short answer only (a name, date, number or short phrase; yes or no for yes/no questions)."},
            {"role": "user", "content": f"Passages:\n{format_evidence(ev, 600)}\n\nQuestion: {q}\nAnswer:"}]
    t = time.time()
    r = sess.chat(msgs, max_tokens=32)
    a = clean_answer(r.text, q)
    e, f = exact_match(a, golds), f1_score(a, golds)
    em += e; f1 += f
    out.append(dict(q=q, gold=ex.answer, pred=a, em=e, s=round(time.time()-t, 1)))
    print(json.dumps(out[-1]), flush=True)
print("EM", em / len(exs), "F1", f1 / len(exs))
