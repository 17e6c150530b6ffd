// The chainfd command-line tool's subcommands.
#ifndef CHAINFD_CLI_COMMANDS_H
#define CHAINFD_CLI_COMMANDS_H

int cfd_cmd_info(int argc, char** argv);
int cfd_cmd_check(int argc, char** argv);
int cfd_cmd_export(int argc, char** argv);

// The built-in default scene, used when no model is given.
#define CFD_DEFAULT_SCENE CHAINFD_SCENES_DIR "/arm7.xml"

#endif
