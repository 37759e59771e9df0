"""conda-lock.yml files on disk (the model is core/lockfile.py): read and written (lock_io), and the
variant locks with their index (variant_lock)."""
