// A mobile-style grpc-js client of tts.v1.TextToSpeech/Synthesize that survives a dropped connection:
// it keeps the resume token of the last response it received whole, and when the stream breaks
// (UNAVAILABLE, the network went away) it calls again with that token and goes on from there.
//
//   node resume_client.cjs ADDRESS PROTO_ROOT TEXT
//
// Writes one JSON line per response to stdout ({"audio": base64, "token", "attempt"}), a line
// {"broken": code} when a stream breaks, and {"done": attempts} at the end. Keepalive and retry
// settings are the ones docs/api.md recommends for mobile clients.

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

const [address, protoRoot, text] = process.argv.slice(2);
const definition = protoLoader.loadSync("tts/v1/tts.proto", { includeDirs: [protoRoot], keepCase: true, longs: Number, enums: Number });
const { TextToSpeech } = grpc.loadPackageDefinition(definition).tts.v1;

const CHANNEL_OPTIONS = {
  "grpc.keepalive_time_ms": 30000, // a ping every 30 s finds a dead network on an idle connection
  "grpc.keepalive_timeout_ms": 10000, // and gives up on it 10 s later
  "grpc.keepalive_permit_without_calls": 0,
  "grpc.initial_reconnect_backoff_ms": 250,
  "grpc.max_reconnect_backoff_ms": 5000,
};
const MAX_ATTEMPTS = 5;

function write(line) {
  process.stdout.write(JSON.stringify(line) + "\n");
}

function speak(token, attempt) {
  return new Promise((resolve) => {
    const client = new TextToSpeech(address, grpc.credentials.createInsecure(), CHANNEL_OPTIONS);
    const call = client.Synthesize({ text, encoding: 1, resume_token: token }, { deadline: Date.now() + 120000 });
    let last = token;
    call.on("data", (response) => {
      if (response.resume_point && response.resume_point.token) {
        last = response.resume_point.token;
      }
      write({ audio: Buffer.from(response.audio).toString("base64"), token: last, attempt });
    });
    call.on("error", (error) => {
      client.close();
      resolve({ ok: false, code: error.code, token: last });
    });
    call.on("end", () => {
      client.close();
      resolve({ ok: true, token: last });
    });
  });
}

async function main() {
  let token = "";
  for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt += 1) {
    const result = await speak(token, attempt);
    if (result.ok) {
      write({ done: attempt });
      return 0;
    }
    write({ broken: result.code });
    if (result.code !== grpc.status.UNAVAILABLE && result.code !== grpc.status.DEADLINE_EXCEEDED) {
      return 1;
    }
    token = result.token;
    await new Promise((wait) => setTimeout(wait, 250 * attempt)); // back off, then go on from the token
  }
  return 1;
}

main().then((code) => process.exit(code));
