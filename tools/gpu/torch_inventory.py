# Summarises torch_reference.py's per-kernel profile (torch-reference.json) into a markdown
# inventory: per model and mode, kernels grouped by name (count, total ms, meshsim's kind).
import json, re, sys
d = json.load(open(sys.argv[1]))
def short(n):
    n = n.replace('(anonymous namespace)::', '')
    n = re.sub(r'\(.*', '', n)            # drop argument lists
    n = re.sub(r'<.*>', '<>', n)          # drop template arguments
    return n.replace('void ', '').strip()[:70]
out = []
for model in ('gpt3', 'llama3'):
    for mode in ('eager', 'compiled'):
        p = d['models'][model]['modes'][mode]['profile']
        out.append(f"\n#### {model}, {mode}: {p['launches']} kernel launches, {p['copies']} copies, "
                   f"busy {p['busy_ms']:.1f} of {p['step_ms']:.1f} ms ({100*p['busy_fraction']:.1f}%)\n")
        out.append('| kernel (name shortened) | kind | launches | ms |\n|---|---|---:|---:|')
        g = {}
        for k in p['kernels']:
            key = (short(k['name']), k['kind'])
            c, t = g.get(key, (0, 0.0)); g[key] = (c + 1, t + k['ms'])
        rows = sorted(g.items(), key=lambda kv: -kv[1][1])
        shown = rows[:12]
        for (name, kind), (c, t) in shown:
            out.append(f'| `{name}` | {kind} | {c} | {t:.2f} |')
        rest = rows[12:]
        if rest:
            out.append(f'| {len(rest)} other names | | {sum(c for _, (c, _) in rest)} | {sum(t for _, (_, t) in rest):.2f} |')
print('\n'.join(out))
