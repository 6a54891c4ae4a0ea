/*
 * bench.h -- `moonshard-bench`: throughput and memory figures of
 * moonshard with a baseline measured in the same run. Built from bench/
 * into its own executable, never installed; the shipped `moonshard`
 * binary holds none of it.
 */
#ifndef MS_BENCH_H
#define MS_BENCH_H

/* Runs `moonshard-bench local [--ids N] [--messages N]`; argv[0] is
 * "local". Prints the figures; returns the exit code. */
int ms_bench_local_main(int argc, char **argv);

/* Runs `moonshard-bench cluster [--seconds S] [--ids N]`; argv[0] is
 * "cluster". Prints the figures; returns the exit code. */
int ms_bench_cluster_main(int argc, char **argv);

/* Runs `moonshard-bench handoff [--entities N] [--shards S]
 * [--callers C]`; argv[0] is "handoff". Prints the figures; returns the
 * exit code. */
int ms_bench_handoff_main(int argc, char **argv);

/* Runs `moonshard-bench persist [--seconds S] [--ids N]`; argv[0] is
 * "persist": pgbench and committed asks of an event-sourced counter on
 * one throwaway PostgreSQL (.ci/pg). Prints the figures; returns the exit
 * code. */
int ms_bench_persist_main(int argc, char **argv);

/* Runs `moonshard-bench remember [--entities N] [--shards S]
 * [--callers C]`; argv[0] is "remember": the eager start of remembered
 * entities whose shards move to another node, under another type's
 * traffic (remember.c). Prints the figures; returns the exit code. */
int ms_bench_remember_main(int argc, char **argv);

#endif
