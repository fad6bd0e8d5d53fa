DROP TABLE client_agent;
