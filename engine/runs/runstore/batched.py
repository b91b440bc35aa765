"""The fast path's statements (engine/runs/fastpath.py), for asyncpg.

Written for asyncpg directly (no ORM between the runner and the wire): ``:name`` parameters are
turned into ``$n`` once, by :func:`engine.platform.db.positional`. A transition of an internal step that can only
succeed is then two statements — the lock (``LOCK_FOR_TRANSITION``, shared by every run of a group commit) and one
data-modifying statement that makes the effect, records the attempt and the audit events, and
advances the run — and the commit.
"""

from __future__ import annotations

from engine.platform.db import positional
from engine.runs.states import RUN_EDGES

# Lock every listed run this worker still holds, for this transaction (a run missing from the result
# was lost: its lease expired or another worker holds it); read with it what a transition needs: its
# workflow's state, its publisher's status and authorization epochs, and the attempts of its current
# step (a step's index names it within the pinned revision). A row lock writes no new version of the
# row: the lease is renewed by the advance itself (``FAST_TRANSITIONS``), and a run the fast path
# leaves to the ordinary transition is renewed there.
LOCK_FOR_TRANSITION = positional(
    """
    SELECT r.id, r.realm_id, r.workflow_id, r.revision_id, r.subject_id, r.organization_id, r.input_version,
              r.publisher_id, r.state, r.step_index, r.due_at, r.cancel_requested_at,
              (SELECT w.state FROM workflows w WHERE w.id = r.workflow_id) AS workflow_state,
              (SELECT u.status FROM users u WHERE u.id = r.publisher_id) AS publisher_status,
              (SELECT u.authz_epoch FROM users u WHERE u.id = r.publisher_id) AS publisher_epoch,
              (SELECT u.authz_epoch FROM users u WHERE u.id = r.subject_id) AS subject_epoch,
              (SELECT m.authz_epoch FROM realms m WHERE m.id = r.realm_id) AS realm_epoch,
              (SELECT count(*) FROM step_attempts a
                WHERE a.run_id = r.id AND a.step_index = r.step_index) AS attempts,
              (SELECT count(*) FROM step_attempts a
                WHERE a.run_id = r.id AND a.step_index = r.step_index AND a.state = 'succeeded') AS succeeded
      FROM workflow_runs r
     WHERE r.id = ANY(:run_ids::text[]) AND r.lease_owner = :worker_id AND r.lease_expires_at > :now
       FOR NO KEY UPDATE OF r
    """
)

# A pinned revision: immutable once written, so cached by id for the life of the process.
REVISION_BY_ID = positional("SELECT number, hash, definition::text FROM workflow_revisions WHERE id = :revision_id")

# A role as the grant ceiling sees it (cached while the realm's authorization epoch stays put).
ROLE_BY_ID = positional(
    "SELECT realm_id, name, permissions, boundary, requires_approval FROM roles WHERE id = :role_id"
)

# A group, and every role its membership gives — its own and its ancestors' (cached like roles).
GROUP_WITH_ROLES = positional(
    """
    WITH RECURSIVE chain AS (
        SELECT id, parent_id FROM groups WHERE id = :group_id
        UNION
        SELECT g.id, g.parent_id FROM groups g JOIN chain c ON g.id = c.parent_id
    )
    SELECT g.realm_id, g.organization_id, g.name,
           (SELECT coalesce(json_agg(json_build_array(r.name, r.permissions, r.boundary)), '[]')::text
              FROM roles r
             WHERE r.id IN (SELECT gr.role_id FROM chain c JOIN group_roles gr ON gr.group_id = c.id)) AS roles
      FROM groups g
     WHERE g.id = :group_id
    """
)

# What the decisions of a group's steps read of the directory, for every run at once (one row per
# run, in no particular order): the subject (a user of the realm: its email and status), whether
# the organization the step acts in is the realm's, the subject's membership of ``member_org`` and
# place in ``group``, whether it holds ``role`` in ``grant_org`` now (an expired grant does not
# count), its grants of ``role`` (``remove_role``), the groups it is in within ``member_org``
# (``remove_membership``), whether — only where ``want_admin`` — it is an active holder of
# realm-admin (the writers' last-administrator rule, engine/directory/admins.py), and for a notice
# (``want_notice``) the workflow's and the realm's names and the realm's stored wording.
STEP_FACTS = positional(
    """
    SELECT m.run_id,
           u.email AS subject_email, u.status AS subject_status,
           coalesce((SELECT o.realm_id FROM organizations o WHERE o.id = m.org) = m.realm_id, false) AS org_exists,
           (SELECT ms.id FROM memberships ms
             WHERE ms.organization_id = m.member_org AND ms.user_id = m.subject_id AND ms.realm_id = m.realm_id)
             AS membership_id,
           (SELECT 1 FROM group_members gm
             WHERE gm.group_id = m.group_id AND gm.user_id = m.subject_id AND gm.realm_id = m.realm_id
             LIMIT 1) IS NOT NULL AS in_group,
           (SELECT 1 FROM role_assignments ra
             WHERE ra.realm_id = m.realm_id AND ra.role_id = m.role_id AND ra.user_id = m.subject_id
               AND ra.organization_id IS NOT DISTINCT FROM m.grant_org
               AND (ra.expires_at IS NULL OR ra.expires_at > :wall_now)
             LIMIT 1) IS NOT NULL AS holds_grant,
           CASE WHEN m.want_grants THEN
               (SELECT coalesce(json_agg(json_build_array(ra.id, ra.organization_id) ORDER BY ra.id), '[]')::text
                  FROM role_assignments ra
                 WHERE ra.realm_id = m.realm_id AND ra.role_id = m.role_id AND ra.user_id = m.subject_id)
           END AS grants,
           CASE WHEN m.want_groups THEN
               (SELECT coalesce(array_agg(g.id ORDER BY g.id), '{}')
                  FROM group_members gm JOIN groups g ON g.id = gm.group_id
                 WHERE gm.user_id = m.subject_id AND g.organization_id = m.member_org)
           END AS joined_groups,
           CASE WHEN m.want_admin THEN (
               WITH RECURSIVE admin_groups AS (
                   SELECT gr.group_id AS id
                     FROM group_roles gr JOIN roles r ON r.id = gr.role_id
                    WHERE r.realm_id = m.realm_id AND r.builtin AND r.name = :admin_role
                   UNION
                   SELECT g.id FROM groups g JOIN admin_groups ag ON g.parent_id = ag.id
               )
               SELECT u.status = 'active'
                      AND (EXISTS (SELECT 1 FROM role_assignments ra JOIN roles r ON r.id = ra.role_id
                                    WHERE ra.realm_id = m.realm_id AND ra.user_id = m.subject_id
                                      AND r.builtin AND r.name = :admin_role
                                      AND (ra.expires_at IS NULL OR ra.expires_at > now()))
                           OR EXISTS (SELECT 1 FROM group_members gm JOIN admin_groups ag ON ag.id = gm.group_id
                                       WHERE gm.user_id = m.subject_id))
           ) END AS subject_is_admin,
           CASE WHEN m.want_notice THEN (SELECT w.name FROM workflows w WHERE w.id = m.workflow_id) END
             AS workflow_name,
           CASE WHEN m.want_notice THEN (SELECT rm.name FROM realms rm WHERE rm.id = m.realm_id) END AS realm_name,
           CASE WHEN m.want_notice THEN
               (SELECT json_build_array(t.subject, t.body)::text FROM templates t
                 WHERE t.realm_id = m.realm_id AND t.name = :notice_template)
           END AS notice_template
      FROM unnest(:run_ids::text[], :realm_ids::text[], :subject_ids::text[], :orgs::text[], :member_orgs::text[],
                  :group_ids::text[], :role_ids::text[], :grant_orgs::text[], :want_grants::boolean[],
                  :want_groups::boolean[], :want_admin::boolean[], :workflow_ids::text[], :want_notice::boolean[])
           AS m(run_id, realm_id, subject_id, org, member_org, group_id, role_id, grant_org, want_grants,
                want_groups, want_admin, workflow_id, want_notice)
      LEFT JOIN users u ON u.id = m.subject_id AND u.realm_id = m.realm_id
    """
)

# The transitions of a group commit, every run at once, in one statement. Each run is one row of the
# input (``moves``, unnested from one array per column) and is either a succeeded step that names its
# effect — ``assign_role``, ``remove_role``, ``add_to_group``, ``remove_from_group``,
# ``remove_membership``, ``suspend_user``, ``notify`` (the notice's row, rendered before; the notice
# sender mails it once the transaction has committed) or ``none`` (``end``) — or a refused one
# (``attempt_state`` 'failed', effect ``none``): its failed attempt, and the run compensating from
# now, as engine/runs/runner.py records a refusal. ``applicable`` keeps the runs whose effect can
# still be made as the database stands (the facts it was decided on, ``STEP_FACTS``, still hold); a
# run it drops writes nothing at all, and the runner takes its step the ordinary way, which decides
# it again. The runs of one group are independent (no run's subject is another run's publisher or
# subject), so one snapshot serves all. For the runs kept, together: the advance (under the lease,
# from the state each was read in, and only along an edge of ``states.RUN_TRANSITIONS``: the list
# is generated from it), the attempt — a second succeeded attempt of one step is refused by
# uq_step_attempts_succeeded, which fails the whole group — the audit and outbox events, and the
# effect.
#
# A run that goes on keeps its due time (it stays due, since the same moment) and has its lease
# renewed: unless its state changes too, no indexed column changes, and the advance is a HOT update
# that adds nothing to the run's indexes. A refused run is due at once, to compensate.
#
# The effects' conditions: ``assign_role`` — the subject is a user of the realm, the organization
# (when the grant names one) is the realm's, and the subject does not hold the role in that scope
# yet (an expired grant does not count); ``add_to_group`` — the subject is a user of the realm and a
# member of the group's organization, and not in the group yet; ``remove_from_group`` — the subject
# is in the group; ``remove_role`` — the subject's grants of the role are the ones decided on
# (``item_set``); ``remove_membership`` — the membership is still there and the subject's groups in
# the organization are the ones decided on; ``suspend_user`` — the subject is not suspended yet. The
# grant ceiling, the publisher's authority and the last-administrator rule (a step that may take
# realm-admin away never comes here) were checked before, in Python. A suspension ends the subject's
# live sessions, API tokens and unused sign-in links, and its audit event counts them (``ended``), as
# engine/directory/principals.py::apply_user_status does.
FAST_TRANSITIONS = positional(
    """
    WITH moves AS (
        SELECT *
          FROM unnest(:run_ids::text[], :realm_ids::text[], :subject_ids::text[], :publisher_ids::text[],
                      :from_states::text[], :targets::text[], :step_indexes::int[], :finished::boolean[],
                      :lease_expires_ats::timestamptz[], :moved_ats::timestamptz[], :wall_nows::timestamptz[],
                      :attempt_ids::text[], :step_ids::text[], :step_types::text[], :numbers::int[],
                      :idempotency_keys::text[], :inputs::jsonb[], :input_versions::text[], :results::jsonb[],
                      :max_attempts::int[], :backoffs_ms::int[], :strategies::text[], :compensation_states::text[],
                      :started_ats::timestamptz[], :effects::text[], :role_ids::text[], :organization_ids::text[],
                      :assignment_ids::text[], :expires_ats::timestamptz[], :group_ids::text[],
                      :attempt_states::text[], :error_categories::text[], :error_messages::text[],
                      :item_sets::jsonb[], :membership_ids::text[], :notice_ids::text[], :workflow_ids::text[],
                      :notices::text[], :to_addresses::text[], :notice_subjects::text[], :notice_bodies::text[],
                      :notice_states::text[], :notice_errors::text[])
               AS m(run_id, realm_id, subject_id, publisher_id, from_state, target, step_index, finished,
                    lease_expires_at, moved_at, wall_now, attempt_id, step_id, step_type, number, idempotency_key,
                    input, input_version, result, max_attempts, backoff_ms, strategy, compensation_state,
                    started_at, effect, role_id, organization_id, assignment_id, expires_at, group_id,
                    attempt_state, error_category, error_message, item_set, membership_id, notice_id, workflow_id,
                    notice, to_address, notice_subject, notice_body, notice_state, notice_error)
    ),
    -- Every condition is a scalar probe of a key, never EXISTS: the planner may turn a correlated
    -- EXISTS into a hash of the whole table, built at every execution (users, memberships, group
    -- members), and with a cached plan made while the tables were small it does.
    applicable AS (
        SELECT m.*
          FROM moves m
         WHERE CASE m.effect
               WHEN 'assign_role' THEN
                    coalesce((SELECT u.realm_id FROM users u WHERE u.id = m.subject_id) = m.realm_id, false)
                    AND (m.organization_id IS NULL OR coalesce(
                         (SELECT o.realm_id FROM organizations o WHERE o.id = m.organization_id) = m.realm_id, false))
                    AND (SELECT 1 FROM role_assignments ra
                          WHERE ra.realm_id = m.realm_id AND ra.role_id = m.role_id AND ra.user_id = m.subject_id
                            AND ra.organization_id IS NOT DISTINCT FROM m.organization_id
                            AND (ra.expires_at IS NULL OR ra.expires_at > m.wall_now)
                          LIMIT 1) IS NULL
               WHEN 'remove_from_group' THEN
                    (SELECT 1 FROM group_members gm
                      WHERE gm.group_id = m.group_id AND gm.user_id = m.subject_id AND gm.realm_id = m.realm_id
                      LIMIT 1) IS NOT NULL
               WHEN 'add_to_group' THEN
                    coalesce((SELECT u.realm_id FROM users u WHERE u.id = m.subject_id) = m.realm_id, false)
                    AND (SELECT 1 FROM memberships ms
                          WHERE ms.organization_id = m.organization_id AND ms.user_id = m.subject_id
                          LIMIT 1) IS NOT NULL
                    AND (SELECT 1 FROM group_members gm
                          WHERE gm.group_id = m.group_id AND gm.user_id = m.subject_id
                          LIMIT 1) IS NULL
               WHEN 'remove_role' THEN
                    (SELECT coalesce(jsonb_agg(ra.id), '[]'::jsonb) @> m.item_set
                            AND coalesce(jsonb_agg(ra.id), '[]'::jsonb) <@ m.item_set
                       FROM role_assignments ra
                      WHERE ra.realm_id = m.realm_id AND ra.role_id = m.role_id AND ra.user_id = m.subject_id)
               WHEN 'remove_membership' THEN
                    (SELECT 1 FROM memberships ms WHERE ms.id = m.membership_id AND ms.user_id = m.subject_id
                      LIMIT 1) IS NOT NULL
                    AND (SELECT coalesce(jsonb_agg(g.id), '[]'::jsonb) @> m.item_set
                                AND coalesce(jsonb_agg(g.id), '[]'::jsonb) <@ m.item_set
                           FROM group_members gm JOIN groups g ON g.id = gm.group_id
                          WHERE gm.user_id = m.subject_id AND g.organization_id = m.organization_id)
               WHEN 'suspend_user' THEN
                    coalesce((SELECT u.status FROM users u WHERE u.id = m.subject_id AND u.realm_id = m.realm_id)
                             <> 'suspended', false)
               ELSE true
               END
    ),
    advanced AS (
        UPDATE workflow_runs r
           SET state = a.target,
               step_index = CASE WHEN a.attempt_state = 'failed' THEN r.step_index ELSE a.step_index + 1 END,
               updated_at = a.moved_at,
               due_at = CASE WHEN a.finished THEN NULL WHEN a.attempt_state = 'failed' THEN a.moved_at
                             ELSE r.due_at END,
               finished_at = CASE WHEN a.finished THEN a.moved_at ELSE r.finished_at END,
               lease_owner = CASE WHEN a.finished THEN NULL ELSE r.lease_owner END,
               lease_expires_at = CASE WHEN a.finished THEN NULL ELSE a.lease_expires_at END,
               error_category = CASE WHEN a.attempt_state = 'failed' THEN a.error_category ELSE r.error_category END,
               last_error = CASE WHEN a.attempt_state = 'failed' THEN a.error_message ELSE r.last_error END
          FROM applicable a
         WHERE r.id = ANY(:run_ids::text[])  -- the group's runs, by key, whatever the join's plan
           AND r.id = a.run_id AND r.state = a.from_state AND r.step_index = a.step_index
           AND r.lease_owner = :worker_id
           AND (r.state, a.target) IN (VALUES __RUN_EDGES__)  -- states.RUN_TRANSITIONS, and nothing else
        RETURNING r.id
    ),
    made AS (
        SELECT a.* FROM applicable a JOIN advanced v ON v.id = a.run_id
    ),
    interrupted AS (
        UPDATE step_attempts sa
           SET state = 'failed', error_category = 'interrupted',
               error_message = 'The worker stopped between the endpoint call and its outcome.', finished_at = m.moved_at
          FROM made m
         WHERE m.attempt_state = 'failed' AND sa.run_id = m.run_id AND sa.state = 'started'
    ),
    attempted AS (
        INSERT INTO step_attempts (id, run_id, realm_id, step_id, step_index, step_type, number, idempotency_key,
                                   state, input, input_version, result, error_category, error_message,
                                   max_attempts, backoff_ms, compensation_strategy, compensation_state,
                                   compensation_attempts, started_at, finished_at)
        SELECT attempt_id, run_id, realm_id, step_id, step_index, step_type, number, idempotency_key,
               attempt_state, input, input_version, result, error_category, error_message,
               max_attempts, backoff_ms, strategy, compensation_state, 0, started_at, moved_at
          FROM made
    ),
    revoked AS (
        DELETE FROM role_assignments ra
         USING made m, jsonb_array_elements_text(m.item_set) AS x(id)
         WHERE m.effect = 'remove_role' AND ra.id = x.id
    ),
    groups_left AS (
        DELETE FROM group_members gm
         USING made m, jsonb_array_elements_text(m.item_set) AS x(id)
         WHERE m.effect = 'remove_membership' AND gm.group_id = x.id AND gm.user_id = m.subject_id
    ),
    membership_ended AS (
        DELETE FROM memberships ms
         USING made m
         WHERE m.effect = 'remove_membership' AND ms.id = m.membership_id
    ),
    suspended AS (
        UPDATE users u
           SET status = 'suspended', updated_at = m.wall_now
          FROM made m
         WHERE m.effect = 'suspend_user' AND u.id = m.subject_id
    ),
    sessions_ended AS (
        UPDATE sessions s
           SET revoked_at = m.wall_now
          FROM made m
         WHERE m.effect = 'suspend_user' AND s.user_id = m.subject_id AND s.revoked_at IS NULL
           AND s.expires_at > m.wall_now
        RETURNING s.user_id
    ),
    tokens_ended AS (
        UPDATE api_tokens t
           SET revoked_at = m.wall_now
          FROM made m
         WHERE m.effect = 'suspend_user' AND t.user_id = m.subject_id AND t.revoked_at IS NULL
        RETURNING t.user_id
    ),
    links_ended AS (
        UPDATE sign_in_links l
           SET used_at = m.wall_now
          FROM made m
         WHERE m.effect = 'suspend_user' AND l.user_id = m.subject_id AND l.used_at IS NULL
        RETURNING l.user_id
    ),
    audited AS (
        INSERT INTO audit_events (id, realm_id, occurred_at, actor_type, actor_id, category, type, subject_type,
                                  subject_id, request_id, correlation_id, details)
        SELECT e.id, m.realm_id, m.wall_now, 'user', m.publisher_id, e.category, e.type, e.subject_type,
               e.subject_id, m.run_id, m.run_id,
               CASE WHEN m.effect = 'suspend_user' AND e.type = 'user.suspended' THEN
                    e.details || jsonb_build_object('ended', jsonb_build_object(
                        'sessions', (SELECT count(*) FROM sessions_ended x WHERE x.user_id = m.subject_id),
                        'tokens', (SELECT count(*) FROM tokens_ended x WHERE x.user_id = m.subject_id),
                        'sign_in_links', (SELECT count(*) FROM links_ended x WHERE x.user_id = m.subject_id)))
               ELSE e.details END
          FROM unnest(:audit_run_ids::text[], :audit_ids::text[], :audit_categories::text[], :audit_types::text[],
                      :audit_subject_types::text[], :audit_subject_ids::text[], :audit_details::jsonb[])
               AS e(run_id, id, category, type, subject_type, subject_id, details)
          JOIN made m ON m.run_id = e.run_id
    ),
    emitted AS (
        INSERT INTO outbox_events (id, realm_id, type, event_version, subject_id, organization_id, payload,
                                   correlation_id)
        SELECT o.id, m.realm_id, o.type, 1, o.subject_id, o.organization_id, o.payload, m.run_id
          FROM unnest(:outbox_run_ids::text[], :outbox_ids::text[], :outbox_types::text[],
                      :outbox_subject_ids::text[], :outbox_organization_ids::text[], :outbox_payloads::jsonb[])
               AS o(run_id, id, type, subject_id, organization_id, payload)
          JOIN made m ON m.run_id = o.run_id
    ),
    noticed AS (
        INSERT INTO workflow_notices (id, realm_id, run_id, workflow_id, user_id, notice, to_address, subject, body,
                                     state, attempts, next_attempt_at, last_error, created_at)
        SELECT notice_id, realm_id, run_id, workflow_id, subject_id, notice, to_address, notice_subject, notice_body,
               notice_state, 0, CASE WHEN notice_state = 'queued' THEN started_at END, notice_error, started_at
          FROM made
         WHERE effect = 'notify'
    ),
    granted AS (
        INSERT INTO role_assignments (id, realm_id, role_id, user_id, organization_id, expires_at, granted_by,
                                      source_run_id, created_at)
        SELECT assignment_id, realm_id, role_id, subject_id, organization_id, expires_at, publisher_id,
               run_id, wall_now
          FROM made
         WHERE effect = 'assign_role'
    ),
    joined AS (
        INSERT INTO group_members (group_id, user_id, realm_id, added_by, source_run_id, created_at)
        SELECT group_id, subject_id, realm_id, publisher_id, run_id, wall_now
          FROM made
         WHERE effect = 'add_to_group'
    ),
    left_group AS (
        DELETE FROM group_members gm
         USING made m
         WHERE m.effect = 'remove_from_group' AND gm.group_id = m.group_id AND gm.user_id = m.subject_id
    )
    SELECT id FROM advanced
    """.replace("__RUN_EDGES__", ", ".join(f"('{state}', '{target}')" for state, target in RUN_EDGES))
)

# The outbox dispatcher's wake-up, sent (delivered at commit) when a group wrote outbox events.
OUTBOX_WAKE = "SELECT pg_notify('cockpit_outbox', '')"
