-- Admin: engages or releases the kill switch (engaged).
UPDATE kill_switch SET engaged = $1, changed_at = now() WHERE id = 1
