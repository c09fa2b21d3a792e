"""`make say`: speak a text through the gateway and write a WAV file.

    python -m scripts.say --text "Hello there." --out hello.wav [--address 127.0.0.1:50051] [--speed 1.0]
"""

from __future__ import annotations

import argparse
import sys
import time
import wave

import grpc

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", required=True, help="what to say")
    parser.add_argument("--out", default="hello.wav", help="WAV file to write (16-bit mono)")
    parser.add_argument("--address", default="127.0.0.1:50051", help="gateway HOST:PORT")
    parser.add_argument("--voice", default="", help="voice name (default: the server's default voice)")
    parser.add_argument("--speed", type=float, default=1.0, help="speaking-rate multiple, 0.25 to 4.0")
    parser.add_argument("--sample-rate-hz", type=int, default=0, help="output rate (0: the voice's own)")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="deadline of the call in seconds")
    args = parser.parse_args(argv)

    request = tts_pb2.SynthesizeRequest(
        text=args.text, voice=args.voice, speed=args.speed, sample_rate_hz=args.sample_rate_hz, encoding=tts_pb2.LINEAR_PCM
    )
    pcm = bytearray()
    sample_rate_hz = 0
    first_audio_s = None
    started = time.monotonic()
    try:
        with grpc.insecure_channel(args.address) as channel:
            stub = tts_pb2_grpc.TextToSpeechStub(channel)
            for response in stub.Synthesize(request, timeout=args.timeout_s, wait_for_ready=True):
                if response.audio and first_audio_s is None:
                    first_audio_s = time.monotonic() - started
                sample_rate_hz = response.sample_rate_hz
                pcm += response.audio
    except grpc.RpcError as error:
        print(f"error: {error.code().name}: {error.details()}", file=sys.stderr)
        return 1
    total_s = time.monotonic() - started
    with wave.open(args.out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate_hz)
        wav.writeframes(bytes(pcm))
    audio_s = len(pcm) / 2 / sample_rate_hz if sample_rate_hz else 0.0
    print(
        f"wrote {args.out}: {audio_s:.2f} s of audio at {sample_rate_hz} Hz; "
        f"first audio after {first_audio_s or 0.0:.3f} s, done after {total_s:.3f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
