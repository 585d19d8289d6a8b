#!/usr/bin/python3
"""Run a command on rokd and follow its output as it is written, then exit
by its outcome (as `rokctl spawn -f` does).

    python3 follow.py CMD [ARG...]      (default: a command that counts)
"""

import sys

import rok


def main(argv):
    with rok.connect() as client:               # $ROK_SOCKET or default
        task = client.spawn(argv)
        print(f"task {task.id}", file=sys.stderr)
        out = {rok.STDOUT: sys.stdout.buffer, rok.STDERR: sys.stderr.buffer}
        logs = task.logs(follow=True)
        run = 0
        for stream, data in logs:
            if logs.run != run:                 # a retried task's next run
                run = logs.run
                print(f"task {task.id}: run {run}'s output follows",
                      file=sys.stderr)
            out[stream].write(data)
            out[stream].flush()
        result = logs.result or task.join()
        print(f"task {task.id}: {result.describe()}", file=sys.stderr)
        return 0 if result.ok else 1


if __name__ == "__main__":
    argv = sys.argv[1:] or ["sh", "-c", "for i in 1 2 3; do echo $i; "
                            "sleep 0.2; done; echo done >&2"]
    raise SystemExit(main(argv))
