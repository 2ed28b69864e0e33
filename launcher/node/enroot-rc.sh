# shellcheck shell=sh
# enroot start --rc "$kit/node/enroot-rc.sh" NAME COMMAND...: the command script every start
# of the kit's (enroot-start.sh, pyxis-setup.sh) runs inside the container instead of the
# image's /etc/rc. For an image imported from a registry (enroot import docker://..., or
# dockerd://, podman://) Enroot writes the image's ENTRYPOINT into /etc/rc
# (`exec ENTRYPOINT "$@"`): NGC's prints a banner and then runs the command, others run
# something else and never the command (a server, a fixed program). The kit runs its own
# command, as `apptainer exec` and pyxis without --container-entrypoint do; an image without
# /etc/rc (one made from a SIF) started the command this way already. Run by the container's
# sh: POSIX sh only.
exec "$@"
