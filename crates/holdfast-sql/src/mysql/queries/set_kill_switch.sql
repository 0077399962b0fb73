-- Admin: engages or releases the kill switch (engaged).
UPDATE kill_switch SET engaged = ?, changed_at = CURRENT_TIMESTAMP(6) WHERE id = 1
