import sys

if sys.argv[1:2] == ["burst"]:
    from bench.burst import main as burst_main

    sys.exit(burst_main(sys.argv[2:]))
if sys.argv[1:2] == ["chain"]:
    from bench.chain import main as chain_main

    sys.exit(chain_main(sys.argv[2:]))
if sys.argv[1:2] == ["faults"]:
    from bench.faults import main as faults_main

    sys.exit(faults_main(sys.argv[2:]))
if sys.argv[1:2] == ["pace"]:
    from bench.pace import main as pace_main

    sys.exit(pace_main(sys.argv[2:]))
if sys.argv[1:2] == ["resync"]:
    from bench.resync import main as resync_main

    sys.exit(resync_main(sys.argv[2:]))
if sys.argv[1:2] == ["segments"]:
    from bench.segments import main as segments_main

    sys.exit(segments_main(sys.argv[2:]))
if sys.argv[1:2] == ["shapes"]:
    from bench.shapes import main as shapes_main

    sys.exit(shapes_main(sys.argv[2:]))

from bench.run import main

sys.exit(main())
