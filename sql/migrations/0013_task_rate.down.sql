DROP TABLE task_rate;
