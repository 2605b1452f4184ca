-- Undoes 001: the queue's tables go, with every job and outbox row in them.
DROP TABLE IF EXISTS {{schema}}.outbox;
DROP TABLE IF EXISTS {{schema}}.jobs;
