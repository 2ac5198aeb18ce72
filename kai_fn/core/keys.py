"""Every label, annotation and API name kai_fn reads or writes, in one place."""

# Kubeflow Trainer (trainer.kubeflow.org/v1alpha1)
TRAINER_GROUP = "trainer.kubeflow.org"
TRAINER_VERSION = "v1alpha1"
TRAINER_API = f"{TRAINER_GROUP}/{TRAINER_VERSION}"
TRAINJOB_KIND = "TrainJob"
TRAINING_RUNTIME = "TrainingRuntime"
CLUSTER_TRAINING_RUNTIME = "ClusterTrainingRuntime"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"
NODE = "node"  # the trainer replicatedJob and its container
TRAINER_MANAGER = "trainer.kubeflow.org/trainjob-controller"

# JobSet (and the labels it puts on its Jobs' pods)
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
JOBSET_KIND = "JobSet"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"

# KAI Scheduler
KAI_GROUP = "scheduling.run.ai"
KAI_PODGROUP_API = f"{KAI_GROUP}/v2alpha2"
KAI_QUEUE_API = f"{KAI_GROUP}/v2"
PODGROUP_KIND = "PodGroup"
KAI_SCHEDULER_NAME = "kai-scheduler"
KAI_QUEUE_LABEL = "kai.scheduler/queue"
KAI_POD_GROUP_ANNOTATION = "pod-group-name"
KAI_SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
KAI_SKIP_PODGROUPER = "kai.scheduler/skip-podgrouper"
KAI_PRIORITY_LABEL = "priorityClassName"
KAI_PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
KAI_TOPOLOGY = "kai.scheduler/topology"
KAI_TOPOLOGY_REQUIRED = "kai.scheduler/topology-required-placement"
KAI_TOPOLOGY_PREFERRED = "kai.scheduler/topology-preferred-placement"
PREEMPTIBILITY_VALUES = ("preemptible", "non-preemptible")
# Segments (KAI docs/topology/segments.md): on a workload or its pod template, each pod's SubGroup by its index.
KAI_SEGMENT_SIZE = "kai.scheduler/segment-size"
KAI_SEGMENT_REQUIRED = "kai.scheduler/segment-topology-required-placement"
KAI_SEGMENT_PREFERRED = "kai.scheduler/segment-topology-preferred-placement"
KAI_TOPOLOGY_API = "kai.scheduler/v1alpha1"  # Topology, cluster-scoped: spec.levels[].nodeLabel (and alias)
TOPOLOGY_KIND = "Topology"
# Set by the Job controller on each pod of an Indexed Job, and by JobSet on its Jobs' pods.
JOB_COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
JOBSET_JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"

# scheduler-plugins coscheduling (the shape of Trainer's in-tree plugin)
SP_GROUP = "scheduling.x-k8s.io"
SP_PODGROUP_API = f"{SP_GROUP}/v1alpha1"
SP_POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"

# Kueue owns admission of a TrainJob labelled with a queue name.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

# kai_fn's own keys
OPT_IN_LABEL = "kai-fn.io/enabled"  # on a Namespace, "true": kai_fn acts there, and nowhere else
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "kai-fn"
TRAINJOB_NAME_LABEL = "kai-fn/trainjob"
TRAINJOB_UID_LABEL = "kai-fn/trainjob-uid"
# kai_fn's decision, on the JobSet:
MARKER_PODGROUP = "kai-fn/podgroup"  # the main gang's PodGroup
MARKER_SKIPPED = "kai-fn/skipped"  # released without a gang, and why
SKIPPED_BY_OPERATOR = "released-by-operator"  # its value when `kubectl kai-fn release` took it out of kai_fn's hands
HOLD_ANNOTATION = "kai-fn/hold"
# On the main PodGroup:
GANG_BOUND_ANNOTATION = "kai-fn/bound"  # when kai_fn saw every pod of the gang on a node (GangBound posted)
TIMED_OUT_ANNOTATION = "kai-fn/timed-out"  # when the schedule timeout ended the current wait
# On a JobSet the admission policy named at its CREATE (knative/components/admission-policy): each pod template names its
# PodGroup (pod-group-name) and KAI's podgrouper skips it. Nothing is held: kai_fn's PodGroups, once made, are its
# decision. The JobSet source selects by it.
NAMED_LABEL = "kai-fn/named"
NAMING_POLICY_NAME = "kai-fn-name-gangs"
FIELD_MANAGER = "kai-fn"
MIN_RESOURCES_ANNOTATION = "kai-fn/min-resources"
STAGE_ANNOTATION = "kai-fn/replicated-jobs"  # a staged gang's PodGroup: the replicatedJobs of its wave
RELEASED_AT_ANNOTATION = "kai-fn/released-at"  # on the JobSet: when kai_fn resumed it (the migration, 0.1.0, 0.2.0)
SCHEDULE_TIMEOUT_ANNOTATION = "kai-fn/schedule-timeout-seconds"  # TrainJob: override; PodGroup: the default
# A later wave reserved in an earlier wave's gang (kai_fn/core/reserve.py, docs/reservation.md): on the main PodGroup
# and in the JobSet's decision, the replicatedJobs whose places are held and their pods (`launcher=1`); on each
# placeholder pod, the replicatedJob it holds a place for; on the main PodGroup, when kai_fn deleted the last
# placeholder and why (`<time> handed-over`: JobSet made the pods; `<time> finished`: the JobSet finished first).
RESERVES_ANNOTATION = "kai-fn/reserves"
PLACEHOLDER_LABEL = "kai-fn/placeholder-for"
RESERVATION_ENDED_ANNOTATION = "kai-fn/reservation-ended"
READY = "Ready"  # a dependsOn status: the job starts once the jobs it depends on run (JobSet)
# Segments: on the segmented replicatedJob's pod template, what the pod policy (knative/components/segment-policy)
# computes each pod's kai.scheduler/subgroup-name from: the size (a label: the policy's objectSelector), the parent
# SubGroup's name and the pods of one Job (with replicas > 1, JobSet's job index counts in steps of it).
SEGMENT_SIZE_LABEL = "kai-fn/segment-size"
SEGMENT_PARENT_ANNOTATION = "kai-fn/segment-parent"
SEGMENT_JOB_PODS_ANNOTATION = "kai-fn/segment-job-pods"
SEGMENT_POLICY_NAME = "kai-fn-segment-pods"
