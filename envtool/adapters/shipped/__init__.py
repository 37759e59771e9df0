"""What envtool ships beside its code: the environment profiles (profiles) and the training-script
templates `init` writes (templates)."""
