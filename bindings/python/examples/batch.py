#!/usr/bin/python3
"""Run a batch of commands on rokd, at most N at a time, and collect the
results (asyncio: one connection carries every request).

    python3 batch.py [-j N] 'CMD' 'CMD' ...     (each CMD run by sh -c)
    python3 batch.py -j 4                        (a demo batch of 20)
"""

import argparse
import asyncio

import rok
import rok.aio


async def main(commands, parallel):
    queue = list(enumerate(commands))
    results = [None] * len(commands)

    async with rok.aio.connect() as client:      # $ROK_SOCKET or default
        async def worker():
            while queue:
                i, cmd = queue.pop(0)
                task = await client.spawn(["sh", "-c", cmd])
                results[i] = await task.join()

        await asyncio.gather(*(worker() for _ in range(parallel)))

    for cmd, r in zip(commands, results):
        print(f"{r.id:>8}  {r.describe():<28} {cmd}")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-j", type=int, default=4, help="parallel limit")
    p.add_argument("commands", nargs="*")
    a = p.parse_args()
    cmds = a.commands or [f"sleep 0.{i % 5}; test {i} != 13"
                          for i in range(20)]
    raise SystemExit(asyncio.run(main(cmds, max(1, a.j))))
