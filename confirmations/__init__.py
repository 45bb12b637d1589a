"""Human approval of pending confirmations and the one executor of approved mutations."""
