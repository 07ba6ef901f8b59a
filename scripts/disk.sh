# Sourced by scripts/test.sh and scripts/reliability.sh: disk use and room
# for the next build (NOTE [Disk budget] in scripts/test.sh). Needs
# $CARGO_TARGET_DIR.

# Free space (GiB, rounded down) on the target dir's filesystem.
free_gib() {
    mkdir -p "$CARGO_TARGET_DIR"
    df -Pk "$CARGO_TARGET_DIR" | awk 'NR == 2 {print int($4 / 1048576)}'
}

# disk_report WHEN: one line, the target dir's size and the free space.
disk_report() {
    echo "disk ($1): target dir $(du -sh "$CARGO_TARGET_DIR" 2>/dev/null | cut -f1), $(free_gib) GiB free"
}

# make_room DIR...: below MIN_FREE_GIB (default 12) of free space, deletes
# the given build dirs (paths under the target dir), which the caller knows
# no later step of the run reads. Above it, keeps them: they make the next
# run fast.
make_room() {
    local free
    free="$(free_gib)"
    if ((free >= ${MIN_FREE_GIB:-12})); then
        return 0
    fi
    echo "only $free GiB free: deleting build dirs no later step reads: $*"
    local d
    for d in "$@"; do
        rm -rf "${CARGO_TARGET_DIR:?}/$d"
    done
    disk_report "after make_room"
}
