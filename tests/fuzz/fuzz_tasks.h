/*
 * fuzz_tasks.h — shared by the in-process fuzz targets (fuzz_tasks.c).
 */
#ifndef ROK_FUZZ_TASKS_H
#define ROK_FUZZ_TASKS_H

/* Waits (bounded) until every task took its first poll, then cancels every
 * unfinished task and waits until none is left. */
void fuzz_tasks_settle(void);

#endif /* ROK_FUZZ_TASKS_H */
