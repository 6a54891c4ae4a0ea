/*
 * cli.h -- the command-line client over a node's HTTP interface.
 */
#ifndef MS_CLI_H
#define MS_CLI_H

/*
 * Runs `moonshard tell|ask|stop|status ...`; argv[0] is the subcommand.
 * Prints the result on stdout, errors on stderr. Returns the process exit
 * code: 0 on success, 1 when the node answered an error, 2 on usage or
 * connection errors.
 */
int ms_cli_main(int argc, char **argv);

#endif
