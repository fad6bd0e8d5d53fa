DROP TABLE IF EXISTS event_outbox, occurrence_user, occurrence_claim, user_state, dispatch,
  client_key, group_member, task_rotate, task_once, task_params_template;
