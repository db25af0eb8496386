"""Run a command and write its wall time and peak RSS as JSON: timed.py OUT.json -- CMD...

Peak RSS is ru_maxrss of the largest process among the command and its waited-for
descendants (for NVIDIA's --jobs pool: the largest worker or the parent), in MB.
"""

import json
import resource
import subprocess
import sys
import time

out, cmd = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
t0 = time.monotonic()
rc = subprocess.call(cmd)
wall = time.monotonic() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
rec = {"cmd": cmd, "rc": rc, "wall_s": round(wall, 3), "peak_rss_mb": round(ru.ru_maxrss / 1024, 1),
       "user_s": round(ru.ru_utime, 2), "sys_s": round(ru.ru_stime, 2)}
with open(out, "w") as f:
    json.dump(rec, f, indent=1)
print(json.dumps(rec))
sys.exit(rc)
