"""When each model step of a worker runs, and how many listeners a worker can take.

- `costs`: what each stage's steps cost on this machine (fitted as they run) and how contention
  stretches them;
- `calibration`: the cost model measured at start-up, on all the cores at once;
- `budget`, `ledger`, `capacity`: the CPU a worker may use, who shares it, and the streams it holds;
- `stream`: one stream's deadlines, and the vocoder's pacing that the acoustic worker's follow;
- `executor`: the inference threads, taking the step that must start first;
- `runner`, `scheduler`: a worker's steps queued with their estimate and timed into the model.
"""
