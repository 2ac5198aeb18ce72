"""kai_fn: gang scheduling for Kubeflow Trainer TrainJobs on the KAI Scheduler, as a Knative function."""
