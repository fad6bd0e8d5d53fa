DROP TABLE heap_change;
