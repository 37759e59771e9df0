"""Installing a lock into a prefix: plan then apply (installer), what is installed (installed), the
prefix's markers and removal (install_state), the pip section through uv (uv_pip), offline bundles
(bundle), progress on stderr (progress)."""
