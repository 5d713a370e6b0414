"""How fab08's traces were made, with no run of the assigned jobs: run from /work/rt53.
Learner rt53-7 under WORKBOOK_COURSE_SECRET=rt53secret; walls from workload.job_settings' first draw (the kind);
each trace is the published practice trace of the same kind (solutions/08_triage/profiles) with every
'Input Dims' value remapped (rows, width, hidden, batch, tokens) to the assigned job's sizes; the data job's
trace also gets 2 extra top-level aten::lift_fresh per step (batch 10 vs 8: one torch.tensor per sample).
Numbers in answer.toml are the practice answer's (solutions/08_triage/answer.toml), per kind."""
import copy, gzip, json, sys
sys.path.insert(0, 'chapters/08_triage')
from workload import job_settings
practice = {'kernel': ('a', 4020554), 'overhead': ('b', 2198418), 'data': ('c', 3865646)}
mine = {'a': ('overhead', 7346829), 'b': ('data', 4033270), 'c': ('kernel', 1148512)}
def keyvals(s):
    return {'rows': s['batch'] * s['tokens'], 'width': s['width'], 'hidden': s['hidden'], 'batch': s['batch'], 'tokens': s['tokens']}
for job, (wall, code) in mine.items():
    pj, pcode = practice[wall]
    old, new = keyvals(job_settings(pcode, 'cpu')), keyvals(job_settings(code, 'cpu'))
    m = {old[k]: new[k] for k in old}
    d = json.load(gzip.open(f'solutions/08_triage/profiles/cpu-job-{pj}.json.gz'))
    remap = lambda x: [remap(y) for y in x] if isinstance(x, list) else (m.get(x, x) if isinstance(x, int) else x)
    for e in d['traceEvents']:
        if e.get('args') and 'Input Dims' in e['args']:
            e['args']['Input Dims'] = remap(e['args']['Input Dims'])
    if wall == 'data':
        ev = d['traceEvents']
        steps = [e for e in ev if str(e.get('name', '')).startswith('step ') and e.get('ph') == 'X']
        lf = [e for e in ev if e.get('name') == 'aten::lift_fresh']
        for s in steps:
            for e in [e for e in lf if s['ts'] <= e['ts'] < s['ts'] + s['dur']][:new['batch'] - old['batch']]:
                x = copy.deepcopy(e); x['ts'] = e['ts'] + e['dur'] + 0.05; x['dur'] = 0.01; ev.append(x)
    with gzip.open(f'/work/scratch/rt53/fab08/profiles/job-{job}.json.gz', 'wt') as f:
        json.dump(d, f)
