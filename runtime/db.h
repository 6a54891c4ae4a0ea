/*
 * db.h -- the `moonshard db` subcommands (runtime/db.c).
 */
#ifndef MS_DB_H
#define MS_DB_H

/* `moonshard db SUB ...` with argv[0] = SUB: "migrate CONFIG" creates or
 * upgrades the schema of the config's database. Returns the exit code:
 * 0, or 1 after a message on stderr. */
int ms_db_main(int argc, char **argv);

/* `moonshard db events CONFIG TYPE ID [--limit N]` (argv[0] = CONFIG):
 * prints the entity's snapshot line, if any, and its latest N events
 * (sequence, epoch, time in UTC, payload), oldest first. Returns 0, 1
 * after one line on stderr (config, connection, schema or query error;
 * the password is never printed) or 2 for a usage error. runtime/db_show.c */
int ms_db_events(int argc, char **argv);

/* `moonshard db leases CONFIG [TYPE]` (argv[0] = CONFIG), also run as
 * `moonshard leases`: prints the config cluster's lease rows (type, shard,
 * owner, epoch, expires_at, held or expired by the database's clock).
 * Returns as ms_db_events. runtime/db_show.c */
int ms_db_leases(int argc, char **argv);

#endif
