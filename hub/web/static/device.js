// This browser as a device: its Ed25519 key (WebCrypto, non-extractable) kept in IndexedDB,
// pairing with a one-time code, sessions opened by signing the hub's challenge.
const DB = "yimi-device";
const STORE = "device";
const SESSION_CONTEXT = "yimi.web-session.v1";
const APPROVAL_CONTEXT = "yimi.approval.v1";

export class ApiError extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error : `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

export async function api(path, body) {
  const init = body === undefined
    ? { credentials: "same-origin" }
    : {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
      };
  const res = await fetch(path, init);
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

const OUTBOX = "outbox"; // typed messages not yet taken by the hub (offline), by id
const ENTRIES = "entries"; // the timeline entries this page has shown, by seq
const KEEP_ENTRIES = 200;

function openDb() {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open(DB, 2);
    req.onupgradeneeded = () => {
      const names = req.result.objectStoreNames;
      if (!names.contains(STORE)) req.result.createObjectStore(STORE);
      if (!names.contains(OUTBOX)) req.result.createObjectStore(OUTBOX, { keyPath: "id" });
      if (!names.contains(ENTRIES)) req.result.createObjectStore(ENTRIES, { keyPath: "seq" });
    };
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

async function idb(mode, fn, store = STORE) {
  const db = await openDb();
  try {
    return await new Promise((resolve, reject) => {
      const tx = db.transaction(store, mode);
      const req = fn(tx.objectStore(store));
      tx.oncomplete = () => resolve(req.result);
      tx.onerror = () => reject(tx.error);
    });
  } finally {
    db.close();
  }
}

export const loadDevice = () => idb("readonly", (s) => s.get("self"));
const saveDevice = (d) => idb("readwrite", (s) => s.put(d, "self"));
export const forgetDevice = () => idb("readwrite", (s) => s.delete("self"));

export const outboxAll = () => idb("readonly", (s) => s.getAll(), OUTBOX);
export const outboxPut = (item) => idb("readwrite", (s) => s.put(item), OUTBOX);
export const outboxDelete = (id) => idb("readwrite", (s) => s.delete(id), OUTBOX);

export async function keepEntries(entries) {
  if (!entries.length) return;
  await idb("readwrite", (s) => {
    for (const e of entries) s.put(e);
    return s.count();
  }, ENTRIES);
  const all = await idb("readonly", (s) => s.getAllKeys(), ENTRIES);
  const old = all.slice(0, Math.max(0, all.length - KEEP_ENTRIES));
  if (old.length) {
    await idb("readwrite", (s) => s.delete(IDBKeyRange.upperBound(old[old.length - 1])), ENTRIES);
  }
}

export const keptEntries = () => idb("readonly", (s) => s.getAll(), ENTRIES);

export function newId() {
  return hex(crypto.getRandomValues(new Uint8Array(16)));
}

export const hex = (bytes) =>
  Array.from(new Uint8Array(bytes), (b) => b.toString(16).padStart(2, "0")).join("");

export function unhex(text) {
  const out = new Uint8Array(text.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(text.substr(i * 2, 2), 16);
  return out;
}

function signingInput(context, body) {
  // what every signature covers: context || 0x00 || body (protos/codec.py signing_input)
  const ctx = new TextEncoder().encode(context);
  const out = new Uint8Array(ctx.length + 1 + body.length);
  out.set(ctx, 0);
  out.set(body, ctx.length + 1);
  return out;
}

async function sign(device, context, body) {
  const sig = await crypto.subtle.sign({ name: "Ed25519" }, device.sign, signingInput(context, body));
  return hex(sig);
}

export async function pair(code, name) {
  const signKeys = await crypto.subtle.generateKey({ name: "Ed25519" }, false, ["sign", "verify"]);
  const boxKeys = await crypto.subtle.generateKey({ name: "X25519" }, false, ["deriveBits"]);
  const signPk = await crypto.subtle.exportKey("raw", signKeys.publicKey);
  const boxPk = await crypto.subtle.exportKey("raw", boxKeys.publicKey);
  const granted = await api("/api/pair", {
    code, name, sign_pk: hex(signPk), box_pk: hex(boxPk),
  });
  const device = {
    device_id: granted.device_id,
    name: granted.name,
    certificate: granted.certificate,
    sign: signKeys.privateKey,
    box: boxKeys.privateKey,
  };
  await saveDevice(device);
  return device;
}

export async function signIn(device) {
  const { challenge } = await api("/api/challenge");
  const signature = await sign(device, SESSION_CONTEXT, unhex(challenge));
  return api("/api/session", { device_id: device.device_id, challenge, signature });
}

let onAuthenticator = () => {};

export function whileAuthenticating(fn) {
  // fn(busy): called true while a navigator.credentials.* call is pending (the page blocks
  // every input meanwhile), false when it is over
  onAuthenticator = fn;
}

async function authenticator(call) {
  onAuthenticator(true);
  try {
    return await call();
  } finally {
    onAuthenticator(false);
  }
}

export async function registerPasskey() {
  // WebAuthn with user verification: what payment approvals need (only when asked)
  const options = await api("/api/passkey/options");
  const cred = await authenticator(() => navigator.credentials.create({
    publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(options),
  }));
  return api("/api/passkey", { credential: cred.toJSON() });
}

async function verifiedAssertion(optionsPath) {
  // a WebAuthn assertion with user verification required, or null if there is none
  const options = await api(optionsPath);
  try {
    const cred = await authenticator(() => navigator.credentials.get({
      publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(options),
    }));
    return cred.toJSON();
  } catch (err) {
    return null;
  }
}

export async function trustMe() {
  // "it's me for the next minute": the hub opens the voice trust window only for an
  // assertion whose user-verified flag is set (it refuses a null one)
  const assertion = await verifiedAssertion("/api/trust/options");
  return api("/api/trust", { assertion });
}

export async function signBody(device, context, bodyHex) {
  // a body the hub built for this device to confirm (a model or brain switch), signed with
  // the device key over signingInput(context, body) like a command's owner device signs it
  return sign(device, context, unhex(bodyHex));
}

export async function answerCard(device, card, decision) {
  // a payment approval needs WebAuthn user verification first (the hub checks it)
  let assertion = null;
  let uvFailed = false;
  if (card.payment && decision === "approve") {
    assertion = await verifiedAssertion(`/api/cards/${card.card_id}/verify`);
    uvFailed = assertion === null; // no assertion: the hub refuses it as not verified
  }
  const prepared = await api(`/api/cards/${card.card_id}/prepare`, { decision, assertion });
  // the body is the protobuf ApprovalBody; it must carry this card's canonical action hash
  if (!prepared.body.includes(card.action_hash)) throw new Error("the answer is for another action");
  const signature = await sign(device, APPROVAL_CONTEXT, unhex(prepared.body));
  const result = await api(`/api/cards/${card.card_id}/answer`, { signature });
  return { ...result, uvFailed, verified: prepared.verified };
}
