# Sourced by the build scripts (scripts/image/build.sh, scripts/k8s/build-control-plane.sh); needs their `log`.
#
#   ensure_host_tools COMMAND:PACKAGE ...
#
# Installs with apt-get (through sudo unless root) the Debian package of every COMMAND missing from PATH (a COMMAND
# that is an absolute path, such as /usr/include/signal.h, stands for a file that must exist), and the
# Debian archive keyring and CA certificates when absent. Returns 1, saying what is missing, on a machine without
# apt-get.
ensure_host_tools() {
  local need=() tool sudo=
  for tool in "$@"; do
    case ${tool%%:*} in
      /*) [ -e "${tool%%:*}" ] || need+=("${tool#*:}") ;;
      *) command -v "${tool%%:*}" >/dev/null || need+=("${tool#*:}") ;;
    esac
  done
  [ -e /usr/share/keyrings/debian-archive-keyring.gpg ] || need+=(debian-archive-keyring)
  [ -e /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
  [ ${#need[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || { log "missing ${need[*]} and no apt-get to install them"; return 1; }
  [ "$(id -u)" = 0 ] || sudo=sudo
  log "installing ${need[*]} with apt-get"
  $sudo apt-get -q update >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get -q install -y --no-install-recommends "${need[@]}" >&2
}
