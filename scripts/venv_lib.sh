# Sourced by compat.sh and frameworks.sh: a venv of their own, made once and reused while it is set up
# for the same thing. Needs PYTHON, VENV and PINS set by the caller.
#
#   make_venv          make $VENV (installing Debian's python3.X-venv first when ensurepip is missing)
#   venv_is_set_up S   true when the stamp S in $VENV says it was set up for this checkout, this
#                      pyproject.toml, ${PINS[*]} and this interpreter
#   venv_set_up S      write that stamp (after a successful install)

make_venv() {
    if [ -x "$VENV/bin/python" ]; then return 0; fi
    echo "==> creating $VENV"
    "$PYTHON" -m venv "$VENV" && return 0
    # Debian's python3 has no ensurepip until python3-venv (python3.X-venv) is installed.
    rm -rf "$VENV"
    command -v apt-get >/dev/null 2>&1 || return 1
    local sudo="" pyver
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    pyver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    echo "==> installing Debian's python${pyver}-venv"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "python${pyver}-venv" >/dev/null \
        || DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    "$PYTHON" -m venv "$VENV"
}

_venv_setup_hash() {
    {
        pwd
        sha256sum pyproject.toml
        echo "${PINS[*]}"
        "$VENV/bin/python" -c 'import sys; print(sys.version)'
    } | sha256sum | cut -d' ' -f1
}

venv_is_set_up() {
    [ "$(cat "$VENV/$1" 2>/dev/null)" = "$(_venv_setup_hash)" ]
}

venv_set_up() {
    _venv_setup_hash >"$VENV/$1"
}
