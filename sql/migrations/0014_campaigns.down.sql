DROP TABLE campaign_item;
DROP TABLE campaign;
