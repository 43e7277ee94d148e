-- The balance of each account: the sum of its ledger (check.py creates this view).
CREATE VIEW balances AS
SELECT account, SUM(amount) AS balance, COUNT(*) AS transactions,
       MAX(produced_at) AS last_transaction
FROM ledger GROUP BY account
