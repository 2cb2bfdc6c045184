"""Server-side functions (PL/pgSQL) of the PostgreSQL engine: a create, unlink, rename, lookup or
path walk in one statement, so one round trip instead of four to seven (store/pgfast.py calls them).

Installed by schema version 4 (`PG_MIGRATIONS[4]`, run by Database._init_schema after the common
migration of that version, inside the same transaction), so a database says in `meta.schema_version`
which functions it holds. A later change of a body is a new version that replaces it.

The rule every writing function keeps: it checks everything that can fail first and writes only
once nothing can; an expected failure (ENOENT, EEXIST, ENOTDIR, ...) is a status code, never an
exception, and leaves nothing written. That is what lets a call of a group-commit batch run without
its own SAVEPOINT (a subtransaction) and still be all or nothing. Cases they do not cover (quotas,
an existing target of a create, a rename over a directory or with RENAME_EXCHANGE, symlinks in a
path) answer status 9 before writing anything, and the Python code of the store handles them.

Parameters are p_* (none named as a column: inodes has p_class .. p_compress), results a_* or
r_*; the attribute columns come in the order of inodes.py's _ATTR_COLS.
"""
from __future__ import annotations

SLOW = 9     # "not covered here": nothing was written, the caller runs the general path

_ATTR_OUT = ("OUT a_ino BIGINT, OUT a_type BIGINT, OUT a_mode BIGINT, OUT a_uid BIGINT, OUT a_gid BIGINT, "
             "OUT a_size BIGINT, OUT a_nlink BIGINT, OUT a_atime BIGINT, OUT a_mtime BIGINT, OUT a_ctime BIGINT, "
             "OUT a_rdev BIGINT, OUT a_generation BIGINT, OUT a_block_size BIGINT, OUT a_stored BIGINT")
_ATTR_INTO = ("a_ino, a_type, a_mode, a_uid, a_gid, a_size, a_nlink, a_atime, a_mtime, a_ctime, a_rdev, "
              "a_generation, a_block_size, a_stored")
_ATTR_SELECT = ("ino, type, mode, uid, gid, size, nlink, atime_ns, mtime_ns, ctime_ns, rdev, generation, "
                "block_size, stored")

# Frees an inode with its blocks, as Inodes._free_inode: every worker holding a committed block,
# and every worker chosen for an open one, gets a pending deletion.
_FREE_INODE = """
CREATE OR REPLACE FUNCTION curvine_free_inode(p_ino BIGINT) RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO deletions (worker_id, block_id)
        SELECT l.worker_id, l.block_id FROM locations l JOIN blocks b ON b.block_id = l.block_id
        WHERE b.ino = p_ino ON CONFLICT DO NOTHING;
    DELETE FROM locations l USING blocks b WHERE b.block_id = l.block_id AND b.ino = p_ino;
    DELETE FROM blocks WHERE ino = p_ino;
    INSERT INTO deletions (worker_id, block_id)
        SELECT w.worker, o.block_id FROM open_blocks o, unnest(string_to_array(o.workers, ',')) AS w(worker)
        WHERE o.ino = p_ino AND w.worker != '' ON CONFLICT DO NOTHING;
    DELETE FROM open_blocks WHERE ino = p_ino;
    DELETE FROM xattrs WHERE ino = p_ino;
    DELETE FROM orphan_keepers WHERE ino = p_ino;
    DELETE FROM quotas WHERE ino = p_ino;
    DELETE FROM inodes WHERE ino = p_ino;
END $$
"""

# A non-directory lost one name and has p_nlink left, as Inodes._unlinked_from.
_UNLINKED_FROM = """
CREATE OR REPLACE FUNCTION curvine_unlinked_from(p_ino BIGINT, p_nlink BIGINT, p_keep BOOLEAN, p_keeper TEXT,
                                                 p_now BIGINT, p_grace BOOLEAN) RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    v_parent BIGINT;
BEGIN
    IF p_nlink <= 0 THEN
        IF p_keep THEN
            UPDATE inodes SET orphan = 1, nlink = 0 WHERE ino = p_ino;
            IF p_keeper != '' THEN
                INSERT INTO orphan_keepers (ino, session) VALUES (p_ino, p_keeper)
                    ON CONFLICT (ino) DO UPDATE SET session = excluded.session;
            END IF;
        ELSIF p_grace THEN
            UPDATE inodes SET orphan = 2, nlink = 0, ctime_ns = p_now WHERE ino = p_ino;
        ELSE
            PERFORM curvine_free_inode(p_ino);
        END IF;
        RETURN;
    END IF;
    SELECT d.parent INTO v_parent FROM dentries d WHERE d.ino = p_ino LIMIT 1;
    IF FOUND THEN
        UPDATE inodes SET parent = v_parent WHERE ino = p_ino;
    END IF;
END $$
"""

# Status: 0 created (the new inode's attributes), 1 no parent, 2 parent not a directory, 9 the
# name exists (`existing`: its inode; Names.create decides what that means).
_CREATE = f"""
CREATE OR REPLACE FUNCTION curvine_create(p_parent BIGINT, p_name TEXT, p_type BIGINT, p_mode BIGINT,
    p_uid BIGINT, p_gid BIGINT, p_size BIGINT, p_nlink BIGINT, p_rdev BIGINT, p_target TEXT, p_now BIGINT,
    p_default_bs BIGINT, OUT status INT, OUT existing BIGINT, {_ATTR_OUT}) LANGUAGE plpgsql AS $$
DECLARE
    v_type BIGINT; v_mode BIGINT; v_gid BIGINT; v_up BIGINT; v_at BIGINT; v_class BIGINT; v_pbs BIGINT;
    v_depth INT := 0;
    v_new_gid BIGINT := p_gid; v_perm BIGINT := p_mode & 4095; v_bs BIGINT := p_default_bs;
BEGIN
    SELECT i.type, i.mode, i.gid, i.parent, i.p_class, i.p_block_size,
           (SELECT d.ino FROM dentries d WHERE d.parent = p_parent AND d.name = p_name)
        INTO v_type, v_mode, v_gid, v_up, v_class, v_pbs, existing
        FROM inodes i WHERE i.ino = p_parent AND i.orphan != 2;
    IF NOT FOUND THEN status := 1; RETURN; END IF;
    IF v_type != 2 THEN status := 2; RETURN; END IF;
    IF existing IS NOT NULL THEN status := 9; RETURN; END IF;
    IF v_mode & 1024 != 0 THEN            -- a setgid directory (posix.inherit_from_parent)
        v_new_gid := v_gid;
        IF p_type = 2 THEN v_perm := v_perm | 1024; END IF;
    END IF;
    IF p_type = 1 THEN
        -- The block size of the nearest directory with a policy, this one first (Policies._effective;
        -- the root always has one). A walk, not a recursive CTE: most files sit one or two levels down.
        IF v_class IS NULL AND p_parent != 1 THEN
            LOOP
                v_at := v_up;
                SELECT i.parent, i.p_class, i.p_block_size INTO v_up, v_class, v_pbs FROM inodes i WHERE i.ino = v_at;
                IF NOT FOUND OR v_depth >= 65536 THEN      -- a broken chain: the root decides
                    SELECT i.p_class, i.p_block_size INTO v_class, v_pbs FROM inodes i WHERE i.ino = 1;
                    EXIT;
                END IF;
                EXIT WHEN v_class IS NOT NULL OR v_at = 1;
                v_depth := v_depth + 1;
            END LOOP;
        END IF;
        IF v_class IS NOT NULL THEN v_bs := COALESCE(NULLIF(v_pbs, 0), p_default_bs); END IF;
    END IF;
    INSERT INTO inodes (type, mode, uid, gid, size, nlink, atime_ns, mtime_ns, ctime_ns, rdev, block_size,
                        target, parent)
        VALUES (p_type, v_perm, p_uid, v_new_gid, p_size, p_nlink, p_now, p_now, p_now, p_rdev, v_bs,
                p_target, p_parent)
        RETURNING {_ATTR_SELECT} INTO {_ATTR_INTO};
    INSERT INTO dentries (parent, name, ino) VALUES (p_parent, p_name, a_ino);
    UPDATE inodes SET mtime_ns = p_now, ctime_ns = p_now,
                      nlink = nlink + CASE WHEN p_type = 2 THEN 1 ELSE 0 END WHERE ino = p_parent;
    status := 0;
END $$
"""

# Status: 0 done (`r_ino`, `r_nlink` as UnlinkResult), 1 no parent, 2 parent not a directory,
# 3 no such name, 4 rmdir of a non-directory, 5 directory not empty, 6 unlink of a directory.
_UNLINK = """
CREATE OR REPLACE FUNCTION curvine_unlink(p_parent BIGINT, p_name TEXT, p_directory BOOLEAN, p_keep BOOLEAN,
    p_keeper TEXT, p_now BIGINT, p_grace BOOLEAN, OUT status INT, OUT r_ino BIGINT, OUT r_nlink BIGINT)
    LANGUAGE plpgsql AS $$
DECLARE
    v_type BIGINT; v_kind BIGINT;
BEGIN
    SELECT p.type, i.ino, i.type INTO v_type, r_ino, v_kind FROM inodes p
        LEFT JOIN dentries d ON d.parent = p.ino AND d.name = p_name LEFT JOIN inodes i ON i.ino = d.ino
        WHERE p.ino = p_parent AND p.orphan != 2;
    IF NOT FOUND THEN status := 1; RETURN; END IF;
    IF v_type != 2 THEN status := 2; RETURN; END IF;
    IF r_ino IS NULL THEN status := 3; RETURN; END IF;
    IF p_directory THEN
        IF v_kind != 2 THEN status := 4; RETURN; END IF;
        IF EXISTS (SELECT 1 FROM dentries d WHERE d.parent = r_ino) THEN status := 5; RETURN; END IF;
        DELETE FROM dentries WHERE parent = p_parent AND name = p_name;
        UPDATE inodes SET nlink = nlink - 1, mtime_ns = p_now, ctime_ns = p_now WHERE ino = p_parent;
        PERFORM curvine_free_inode(r_ino);
        r_nlink := 0;
        status := 0;
        RETURN;
    END IF;
    IF v_kind = 2 THEN status := 6; RETURN; END IF;
    DELETE FROM dentries WHERE parent = p_parent AND name = p_name;
    UPDATE inodes SET nlink = nlink - 1, ctime_ns = p_now WHERE ino = r_ino RETURNING GREATEST(nlink, 0) INTO r_nlink;
    UPDATE inodes SET mtime_ns = p_now, ctime_ns = p_now WHERE ino = p_parent;
    PERFORM curvine_unlinked_from(r_ino, r_nlink, p_keep, p_keeper, p_now, p_grace);
    status := 0;
END $$
"""

# rename(2) without RENAME_EXCHANGE. Status: 0 done (`r_ino`, `r_nlink` as RenameResult; 0, 0
# when nothing was replaced), 1 no such directory (`bad`: which), 2 not a directory (`bad`),
# 3 no such source name, 4 NOREPLACE onto itself, 5 NOREPLACE onto an existing name,
# 6 a directory into its own subtree, 7 a directory over a non-directory, 8 a non-directory over a
# directory, 9 a directory over a directory (the general path: its emptiness, its subtree).
_RENAME = """
CREATE OR REPLACE FUNCTION curvine_rename(p_parent BIGINT, p_name TEXT, p_new_parent BIGINT, p_new_name TEXT,
    p_noreplace BOOLEAN, p_keep BOOLEAN, p_keeper TEXT, p_now BIGINT, p_grace BOOLEAN,
    OUT status INT, OUT bad BIGINT, OUT r_ino BIGINT, OUT r_nlink BIGINT) LANGUAGE plpgsql AS $$
DECLARE
    v_type BIGINT; v_src BIGINT; v_src_kind BIGINT; v_dst BIGINT; v_dst_kind BIGINT; v_inside BOOLEAN;
BEGIN
    r_ino := 0; r_nlink := 0;
    SELECT i.type INTO v_type FROM inodes i WHERE i.ino = p_parent AND i.orphan != 2;
    IF NOT FOUND THEN status := 1; bad := p_parent; RETURN; END IF;
    IF v_type != 2 THEN status := 2; bad := p_parent; RETURN; END IF;
    SELECT i.type INTO v_type FROM inodes i WHERE i.ino = p_new_parent AND i.orphan != 2;
    IF NOT FOUND THEN status := 1; bad := p_new_parent; RETURN; END IF;
    IF v_type != 2 THEN status := 2; bad := p_new_parent; RETURN; END IF;
    SELECT d.ino, i.type INTO v_src, v_src_kind FROM dentries d JOIN inodes i ON i.ino = d.ino
        WHERE d.parent = p_parent AND d.name = p_name;
    IF NOT FOUND THEN status := 3; RETURN; END IF;
    SELECT d.ino, i.type INTO v_dst, v_dst_kind FROM dentries d JOIN inodes i ON i.ino = d.ino
        WHERE d.parent = p_new_parent AND d.name = p_new_name;
    IF p_parent = p_new_parent AND p_name = p_new_name THEN
        status := CASE WHEN p_noreplace THEN 4 ELSE 0 END;
        RETURN;
    END IF;
    IF v_dst IS NOT NULL AND p_noreplace THEN status := 5; RETURN; END IF;
    IF v_dst = v_src THEN status := 0; RETURN; END IF;
    IF v_src_kind = 2 THEN
        WITH RECURSIVE up(ino, depth) AS (
            SELECT p_new_parent, 0
            UNION ALL
            SELECT i.parent, up.depth + 1 FROM up JOIN inodes i ON i.ino = up.ino
            WHERE up.ino != 1 AND up.ino != 0 AND up.ino != v_src AND up.depth < 65536)
        SELECT EXISTS (SELECT 1 FROM up WHERE up.ino = v_src) INTO v_inside;
        IF v_inside THEN status := 6; RETURN; END IF;
    END IF;
    IF v_dst IS NOT NULL THEN
        IF v_src_kind = 2 AND v_dst_kind != 2 THEN status := 7; RETURN; END IF;
        IF v_src_kind != 2 AND v_dst_kind = 2 THEN status := 8; RETURN; END IF;
        IF v_dst_kind = 2 THEN status := 9; RETURN; END IF;
        DELETE FROM dentries WHERE parent = p_new_parent AND name = p_new_name;
        UPDATE inodes SET nlink = nlink - 1, ctime_ns = p_now WHERE ino = v_dst
            RETURNING GREATEST(nlink, 0) INTO r_nlink;
        PERFORM curvine_unlinked_from(v_dst, r_nlink, p_keep, p_keeper, p_now, p_grace);
        r_ino := v_dst;
    END IF;
    DELETE FROM dentries WHERE parent = p_parent AND name = p_name;
    INSERT INTO dentries (parent, name, ino) VALUES (p_new_parent, p_new_name, v_src);
    IF v_src_kind = 2 AND p_parent != p_new_parent THEN
        UPDATE inodes SET nlink = nlink - 1 WHERE ino = p_parent;
        UPDATE inodes SET nlink = nlink + 1 WHERE ino = p_new_parent;
    END IF;
    UPDATE inodes SET parent = p_new_parent, ctime_ns = p_now WHERE ino = v_src;
    UPDATE inodes SET mtime_ns = p_now, ctime_ns = p_now WHERE ino IN (p_parent, p_new_parent);
    status := 0;
END $$
"""

# A path of plain names from the root (no '.', '..' or empty parts: pgfast.py sends those to the
# general walk). Status: 0 found (its attributes), 1 name `at_index` (1-based) not found, 2 name
# `at_index` is below a non-directory, 3 the inode found is in its unlink grace (`a_ino`), 9 a
# symlink on the way (the general walk follows it).
_WALK = f"""
CREATE OR REPLACE FUNCTION curvine_walk(p_names TEXT[], OUT status INT, OUT at_index INT, {_ATTR_OUT})
    LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_cur BIGINT := 1; v_cur_type BIGINT := 2; v_next BIGINT; v_next_type BIGINT; v_name TEXT;
BEGIN
    at_index := 0;
    FOREACH v_name IN ARRAY p_names LOOP
        at_index := at_index + 1;
        IF v_cur_type != 2 THEN status := 2; RETURN; END IF;
        SELECT i.ino, i.type INTO v_next, v_next_type FROM dentries d JOIN inodes i ON i.ino = d.ino
            WHERE d.parent = v_cur AND d.name = v_name;
        IF NOT FOUND THEN status := 1; RETURN; END IF;
        IF v_next_type = 3 THEN status := 9; RETURN; END IF;
        v_cur := v_next; v_cur_type := v_next_type;
    END LOOP;
    SELECT {_ATTR_SELECT} INTO {_ATTR_INTO} FROM inodes WHERE ino = v_cur AND orphan != 2;
    IF NOT FOUND THEN status := 3; a_ino := v_cur; RETURN; END IF;
    status := 0;
END $$
"""

# Version -> statements, run in this order after MIGRATIONS[version] on PostgreSQL only (SQLite
# answers in-process: a round trip saved there is nothing).
PG_MIGRATIONS: dict[int, tuple[str, ...]] = {
    4: (_FREE_INODE, _UNLINKED_FROM, _CREATE, _UNLINK, _RENAME, _WALK),
}
