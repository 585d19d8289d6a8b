#!/usr/bin/python3
"""Race two commands on rokd: the first to finish wins, the other is
cancelled.

    python3 race.py 'CMD1' 'CMD2'       (default: two sleeps that echo)
"""

import sys

import rok


def main(a, b):
    with rok.connect() as client:               # $ROK_SOCKET or default
        tasks = [client.spawn(["sh", "-c", a]), client.spawn(["sh", "-c", b])]
        index, result = client.race(tasks, cancel_rest=True)
        print(f"winner: {[a, b][index]!r} ({result.describe()})")
        loser = tasks[1 - index].join()
        print(f"loser:  {[a, b][1 - index]!r} ({loser.describe()})")
        return 0 if result.ok else 1


if __name__ == "__main__":
    args = sys.argv[1:] or ["sleep 0.3; echo slow", "sleep 0.1; echo fast"]
    if len(args) != 2:
        raise SystemExit(__doc__)
    raise SystemExit(main(*args))
