// The TTS mesh's web page: speaks the text through the edge over grpc-web, plays each piece the
// moment it arrives (Web Audio, no waiting for the end), shows the time to first audio, highlights
// each word while it is spoken, and downloads the result in the chosen encoding. "Stream word by
// word" feeds the text over the WebSocket door five words a second, as a language model writes,
// and plays as audio comes; "Stop" cancels it and shows the words the listener heard.

import { createClient } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";
import { AudioEncoding, TextToSpeech, type SentenceInfo, type Voice, type WordInfo } from "./gen/tts/v1/tts_pb";

const transport = createGrpcWebTransport({ baseUrl: window.location.origin, useBinaryFormat: true });
const client = createClient(TextToSpeech, transport);

/** What the page has done, readable by tests and by curious people in the console. */
interface PageState {
  firstAudioMs: number | null;
  samplesScheduled: number;
  sampleRateHz: number;
  wordsShown: string[];
  words: WordInfo[];
  playedSpans: [number, number][];
  /** How far on the stream's timeline the listener has heard: the audio clock, never past the audio scheduled. */
  playheadS: number;
  done: boolean;
  error: string | null;
  wordsSent: number;
  cancelled: boolean;
  playedMs: number | null;
  heardPlayedMs: number | null;
  heardText: string | null;
  heardWords: string[];
}

const FRESH: Omit<PageState, "words" | "wordsShown" | "playedSpans" | "heardWords"> = {
  firstAudioMs: null, samplesScheduled: 0, sampleRateHz: 0, playheadS: 0, done: false, error: null, wordsSent: 0, cancelled: false,
  playedMs: null, heardPlayedMs: null, heardText: null,
};
const state: PageState = { ...FRESH, wordsShown: [], words: [], playedSpans: [], heardWords: [] };
(window as unknown as { ttsPage: PageState }).ttsPage = state;

const $ = <T extends HTMLElement>(id: string): T => document.getElementById(id) as T;
const textBox = $<HTMLTextAreaElement>("text");
const voiceSelect = $<HTMLSelectElement>("voice");
const speedInput = $<HTMLInputElement>("speed");
const encodingSelect = $<HTMLSelectElement>("encoding");
const speakButton = $<HTMLButtonElement>("speak");
const streamButton = $<HTMLButtonElement>("stream");
const stopButton = $<HTMLButtonElement>("stop");
const heardLine = $<HTMLElement>("heard");
const downloadButton = $<HTMLButtonElement>("download");
const statusLine = $<HTMLElement>("status");
const wordsLine = $<HTMLElement>("words");

const DOWNLOADS: Record<string, { encoding: AudioEncoding; extension: string; type: string }> = {
  wav: { encoding: AudioEncoding.WAV, extension: "wav", type: "audio/wav" },
  ogg_opus: { encoding: AudioEncoding.OGG_OPUS, extension: "opus", type: "audio/ogg" },
  mp3: { encoding: AudioEncoding.MP3, extension: "mp3", type: "audio/mpeg" },
  flac: { encoding: AudioEncoding.FLAC, extension: "flac", type: "audio/flac" },
};

let audioContext: AudioContext | null = null;

/** A voice as the list shows it: name, language, quality, sample rate and, for several, its speakers. */
function voiceLabel(voice: Voice): string {
  const speakers = Object.keys(voice.speakers);
  const who = voice.numSpeakers > 1 ? `, ${voice.numSpeakers} speakers${speakers.length ? ": " + speakers.join(", ") : ""}` : "";
  return `${voice.name} (${voice.languageCode}, ${voice.quality}, ${voice.naturalSampleRateHz / 1000} kHz${who})`;
}

async function loadVoices(): Promise<void> {
  try {
    const reply = await client.listVoices({});
    voiceSelect.replaceChildren(
      ...reply.voices.map((voice) => new Option(voiceLabel(voice), voice.name, voice.isDefault, voice.isDefault)),
    );
  } catch (error) {
    showError(error);
  }
}

function showError(error: unknown): void {
  state.error = error instanceof Error ? error.message : String(error);
  statusLine.textContent = `Error: ${state.error}`;
  statusLine.classList.add("error");
}

async function speak(): Promise<void> {
  speakButton.disabled = true;
  downloadButton.disabled = true;
  reset();
  statusLine.classList.remove("error");
  statusLine.textContent = "Speaking…";
  wordsLine.replaceChildren();
  audioContext ??= new AudioContext();
  await audioContext.resume();
  const context = audioContext;
  const started = performance.now();
  // Timeline second t of the utterance plays at context time t + shift; the shift grows if the
  // network falls behind the playback (the next piece then starts late, and the words follow).
  let shift: number | null = null;
  let playEnd = 0;
  const wordSpans: HTMLSpanElement[] = [];
  try {
    const stream = client.synthesize({
      text: textBox.value,
      voice: voiceSelect.value,
      speed: Number(speedInput.value),
      encoding: AudioEncoding.FLOAT_PCM,
    });
    for await (const response of stream) {
      if (response.sentence) {
        addWords(response.sentence, wordSpans);
      }
      if (response.audio.byteLength === 0) {
        continue;
      }
      if (state.firstAudioMs === null) {
        state.firstAudioMs = performance.now() - started;
        statusLine.textContent = `First audio after ${state.firstAudioMs.toFixed(0)} ms`;
      }
      const samples = new Float32Array(response.audio.slice().buffer);
      const buffer = context.createBuffer(1, samples.length, response.sampleRateHz);
      buffer.copyToChannel(samples, 0);
      const source = context.createBufferSource();
      source.buffer = buffer;
      source.connect(context.destination);
      const earliest = context.currentTime + 0.05;
      if (shift === null || response.audioOffsetS + shift < earliest) {
        shift = earliest - response.audioOffsetS;
      }
      const at = response.audioOffsetS + shift;
      source.start(at);
      playEnd = at + buffer.duration;
      state.samplesScheduled += samples.length;
      state.sampleRateHz = response.sampleRateHz;
      state.playedSpans.push([response.audioOffsetS, response.audioOffsetS + response.audioDurationS]);
      highlightWhilePlaying(context, () => shift ?? 0, wordSpans, () => playEnd);
    }
    state.done = true;
    statusLine.textContent += ` · ${(state.samplesScheduled / Math.max(state.sampleRateHz, 1)).toFixed(2)} s of audio`;
    downloadButton.disabled = false;
  } catch (error) {
    showError(error);
  } finally {
    speakButton.disabled = false;
  }
}

function reset(): void {
  Object.assign(state, { ...FRESH, wordsShown: [], words: [], playedSpans: [], heardWords: [] });
  heardLine.textContent = "";
}

// ---- streaming word by word over the WebSocket door (/v1/audio/speech/stream)

const WORDS_PER_SECOND = 5;
interface SocketWord { word: string; start_ms: number; end_ms: number }
interface SocketEvent {
  type: string; context_id?: string; sentence?: { words: SocketWord[] }; offset_ms?: number; duration_ms?: number;
  bytes?: number; sample_rate_hz?: number; played_ms?: number; heard_text?: string; heard_words?: SocketWord[]; message?: string; code?: string;
}

let stopStream: (() => void) | null = null;

async function streamWords(): Promise<void> {
  speakButton.disabled = streamButton.disabled = downloadButton.disabled = true;
  stopButton.disabled = false;
  reset();
  statusLine.classList.remove("error");
  statusLine.textContent = "Streaming…";
  wordsLine.replaceChildren();
  audioContext ??= new AudioContext();
  await audioContext.resume();
  const context = audioContext;
  const started = performance.now();
  const url = `${window.location.protocol === "https:" ? "wss:" : "ws:"}//${window.location.host}/v1/audio/speech/stream`;
  const socket = new WebSocket(url);
  socket.binaryType = "arraybuffer";
  const sources: AudioBufferSourceNode[] = [];
  const wordSpans: HTMLSpanElement[] = [];
  let shift: number | null = null;
  let playEnd = 0;
  let pending: SocketEvent | null = null; // an audio event whose bytes come in the next binary frame
  let feeder: number | undefined;
  const finish = (): void => {
    window.clearInterval(feeder);
    stopStream = null;
    speakButton.disabled = streamButton.disabled = false;
    stopButton.disabled = true;
  };
  stopStream = () => {
    if (state.done || state.cancelled) {
      return;
    }
    window.clearInterval(feeder);
    // How much the listener heard: the playhead's place on the stream's timeline.
    state.playedMs = shift === null ? 0 : Math.max(0, advancePlayhead(context, shift, playEnd)) * 1000;
    socket.send(JSON.stringify({ type: "cancel", context_id: "0", played_ms: state.playedMs }));
    for (const source of sources) {
      source.stop();
    }
  };
  socket.onopen = () => {
    socket.send(JSON.stringify({ type: "start", voice: voiceSelect.value, speed: Number(speedInput.value), response_format: "float_pcm", audio: "binary" }));
    const words = textBox.value.split(/\s+/).filter((word) => word.length > 0);
    feeder = window.setInterval(() => {
      if (state.wordsSent < words.length) {
        socket.send(JSON.stringify({ type: "text", text: `${words[state.wordsSent]} ` }));
        state.wordsSent += 1;
      } else {
        window.clearInterval(feeder);
        socket.send(JSON.stringify({ type: "close", context_id: "0" }));
      }
    }, 1000 / WORDS_PER_SECOND);
  };
  socket.onmessage = (message: MessageEvent<string | ArrayBuffer>) => {
    if (message.data instanceof ArrayBuffer) {
      if (pending === null || state.cancelled) {
        return;
      }
      const event = pending;
      pending = null;
      const samples = new Float32Array(message.data);
      const buffer = context.createBuffer(1, samples.length, state.sampleRateHz);
      buffer.copyToChannel(samples, 0);
      const source = context.createBufferSource();
      source.buffer = buffer;
      source.connect(context.destination);
      const offsetS = (event.offset_ms ?? 0) / 1000;
      const earliest = context.currentTime + 0.05;
      if (shift === null || offsetS + shift < earliest) {
        shift = earliest - offsetS;
      }
      const at = offsetS + shift;
      source.start(at);
      sources.push(source);
      playEnd = at + buffer.duration;
      state.samplesScheduled += samples.length;
      state.playedSpans.push([offsetS, offsetS + buffer.duration]);
      if (state.firstAudioMs === null) {
        state.firstAudioMs = performance.now() - started;
        statusLine.textContent = `First audio after ${state.firstAudioMs.toFixed(0)} ms`;
      }
      highlightWhilePlaying(context, () => shift ?? 0, wordSpans, () => playEnd);
      return;
    }
    const event = JSON.parse(message.data) as SocketEvent;
    if (event.type === "ready") {
      state.sampleRateHz = event.sample_rate_hz ?? 0;
    } else if (event.type === "audio") {
      if (event.sentence) {
        const words = event.sentence.words.map((w) => ({ text: w.word, startS: w.start_ms / 1000, endS: w.end_ms / 1000 }));
        addWords({ words } as SentenceInfo, wordSpans);
      }
      pending = (event.bytes ?? 0) > 0 ? event : null;
    } else if (event.type === "done") {
      state.done = true;
      statusLine.textContent += ` · ${(state.samplesScheduled / Math.max(state.sampleRateHz, 1)).toFixed(2)} s of audio`;
      socket.close();
      finish();
    } else if (event.type === "cancelled") {
      state.cancelled = true;
      state.heardPlayedMs = event.played_ms ?? null;  // what the server counted: at most the audio it sent
      state.heardText = event.heard_text ?? "";
      state.heardWords = (event.heard_words ?? []).map((w) => w.word);
      heardLine.textContent = `Heard: “${state.heardText}”`;
      socket.close();
      finish();
    } else if (event.type === "error") {
      showError(`${event.code}: ${event.message}`);
      socket.close();
      finish();
    }
  };
  socket.onerror = () => {
    showError("the WebSocket failed");
    finish();
  };
}

function addWords(sentence: SentenceInfo, spans: HTMLSpanElement[]): void {
  for (const word of sentence.words) {
    const span = document.createElement("span");
    span.textContent = word.text;
    span.dataset.start = String(word.startS);
    span.dataset.end = String(word.endS);
    wordsLine.append(span, " ");
    spans.push(span);
    state.words.push(word);
  }
}

/** Moves the playhead (`PageState.playheadS`) to the audio clock's place on the stream's timeline (`shift`
 * maps the timeline onto the clock), never past `playEnd` (on the clock, where the audio scheduled ends)
 * and never back, and returns it. Through a stall the clock runs on, but the listener hears no further
 * than the audio that came; a late piece then re-anchors the timeline 50 ms before it plays. */
function advancePlayhead(context: AudioContext, shift: number, playEnd: number): number {
  state.playheadS = Math.max(state.playheadS, Math.min(context.currentTime, playEnd) - shift);
  return state.playheadS;
}

let highlighted: HTMLSpanElement[] | null = null; // the words an animation loop is lighting now

// One animation loop per utterance lights the word being spoken, until its last scheduled piece has
// played or another utterance starts.
function highlightWhilePlaying(context: AudioContext, shift: () => number, spans: HTMLSpanElement[], until: () => number): void {
  if (highlighted === spans) {
    return;
  }
  highlighted = spans;
  let next = 0; // the first word not yet reached
  const step = (): void => {
    const now = advancePlayhead(context, shift(), until());
    // Every word reached since the last frame counts as shown, even one shorter than a frame.
    while (next < spans.length && Number(spans[next].dataset.start) <= now) {
      state.wordsShown.push(spans[next].textContent ?? "");
      next += 1;
    }
    for (const span of spans) {
      span.classList.toggle("speaking", Number(span.dataset.start) <= now && now < Number(span.dataset.end));
    }
    if (highlighted !== spans) {
      return; // another utterance took over
    }
    if (context.currentTime < until() + 0.1 || (!state.done && !state.cancelled)) {
      requestAnimationFrame(step);
    } else {
      highlighted = null;
    }
  };
  requestAnimationFrame(step);
}

async function download(): Promise<void> {
  const choice = DOWNLOADS[encodingSelect.value];
  const parts: Uint8Array[] = [];
  try {
    for await (const response of client.synthesize({
      text: textBox.value, voice: voiceSelect.value, speed: Number(speedInput.value), encoding: choice.encoding,
    })) {
      parts.push(response.audio);
    }
  } catch (error) {
    showError(error);
    return;
  }
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob(parts as BlobPart[], { type: choice.type }));
  link.download = `speech.${choice.extension}`;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
}

speakButton.addEventListener("click", () => void speak());
streamButton.addEventListener("click", () => void streamWords());
stopButton.addEventListener("click", () => stopStream?.());
downloadButton.addEventListener("click", () => void download());
void loadVoices();
