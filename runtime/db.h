/*
 * db.h -- the `moonshard db` subcommands (runtime/db.c).
 */
#ifndef MS_DB_H
#define MS_DB_H

/* `moonshard db SUB ...` with argv[0] = SUB: "migrate CONFIG" creates or
 * upgrades the schema of the config's database. Returns the exit code:
 * 0, or 1 after a message on stderr. */
int ms_db_main(int argc, char **argv);

#endif
