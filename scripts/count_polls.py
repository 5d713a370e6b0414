import glob, sys
from checker.trace import load
for f in sorted(glob.glob(sys.argv[1] + "/*.json.gz")):
    e = load(f).events
    api = e[(e["kind"] == "cuda_api")]
    q = api[api["name"].astype(str).str.contains("Query")]
    per = q[q["step"].notna()].groupby(["step", "tid"]).size()
    print(f.split("/")[-1], "query calls per (step, thread): max", int(per.max()) if len(per) else 0,
          "median", float(per.median()) if len(per) else 0, "names", sorted(set(q["name"].astype(str))))
