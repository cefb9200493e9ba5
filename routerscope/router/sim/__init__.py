"""The simulator (SIMULATED wherever it shows): what drives the real router without real users or models.

* `fleet`: the simulated fleet (`Fleet`), its clock (`SimClock`) and scripted incidents (`Incidents`).
* `backends`: statistical device and cloud (`StatDevice`, `StatCloud`) and instant ones with fixed results
  (`InstantDevice`, `InstantCloud`: the decision-overhead benchmark and decision-logic tests).
* `texts`: the simulated requests: task mix, texts, and the ground truth (shadow agreement, acceptability).
* `standin_cloud`: `llama_cpp.server` on loopback as an OpenAI-compatible stand-in cloud.

Production modules of `router` never import this package. Nothing here reads a file at import time.
"""
