ALTER TABLE dispatch DROP KEY uq_open_occurrence;
