"""Takes a limit through slidegate's RESP port with redis-py (tests/resp.rs).

    python limit.py PORT[,PORT...] KEY

Sends SG.ACQUIRE KEY:sg 3 60000 and CL.THROTTLE KEY:cl 2 3 60 four times
each, to the ports in turn (the first over RESP3, after HELLO 3, the others
over RESP2), and prints the replies as one JSON object.
"""
import json
import sys

import redis

ports = [int(p) for p in sys.argv[1].split(",")]
key = sys.argv[2]
clients = [
    redis.Redis(host="127.0.0.1", port=port, protocol=3 if i == 0 else 2)
    for i, port in enumerate(ports)
]
for client in clients:
    assert client.ping()
out = {"sg": [], "cl": []}
for n in range(4):
    client = clients[n % len(clients)]
    out["sg"].append(client.execute_command("SG.ACQUIRE", f"{key}:sg", 3, 60000))
for n in range(4):
    client = clients[n % len(clients)]
    out["cl"].append(client.execute_command("CL.THROTTLE", f"{key}:cl", 2, 3, 60))
try:
    clients[0].execute_command("NO.SUCH.COMMAND")
except redis.ResponseError as error:
    out["unknown"] = str(error)
out["after_error"] = clients[0].ping()
print(json.dumps(out))
