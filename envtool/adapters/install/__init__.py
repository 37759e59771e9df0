"""Installing a lock into a prefix: plan then apply (installer), the archives fetched and verified
(fetch), checked to be the locked packages (archive_check) and linked with rattler (link), what is
installed (installed), the prefix's markers and removal (install_state), the pip section through
uv (uv_pip), offline bundles (bundle), progress on stderr (progress)."""
