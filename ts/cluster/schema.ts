/**
 * A small schema check for JSON configuration: objects with known keys (unknown keys are
 * refused, so a misspelt option is an error rather than a silent default), strings, integers
 * and numbers in a range, enumerations and arrays. `firstProblem` names the path of the first
 * bad value (`members[1].address`, `lease.ttlMs`) and says what was expected.
 */

export type Schema =
  | {
      readonly type: 'string';
      /** Whole-string pattern and what it means, for the message. */
      readonly pattern?: { readonly re: RegExp; readonly what: string };
      readonly enum?: readonly string[];
      readonly maxLength?: number;
    }
  | { readonly type: 'integer'; readonly min: number; readonly max: number }
  | { readonly type: 'number'; readonly min: number; readonly max: number; readonly exclusiveMin?: boolean }
  | { readonly type: 'boolean' }
  | { readonly type: 'array'; readonly items: Schema; readonly minItems?: number; readonly maxItems?: number }
  | {
      readonly type: 'object';
      readonly properties: Readonly<Record<string, Schema>>;
      readonly required?: readonly string[];
    };

export interface SchemaProblem {
  /** Where the bad value is: `` for the whole document, else keys and `[i]` indexes joined by dots. */
  readonly path: string;
  readonly message: string;
}

const join = (path: string, key: string) => (path === '' ? key : `${path}.${key}`);
const kind = (v: unknown) => (v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v);

/** The first value of `value` that breaks `schema`, or undefined when it conforms. */
export function firstProblem(schema: Schema, value: unknown, path = ''): SchemaProblem | undefined {
  const bad = (message: string): SchemaProblem => ({ path, message });
  switch (schema.type) {
    case 'string': {
      if (typeof value !== 'string') return bad(`must be a string, got ${kind(value)}`);
      if (value.length === 0) return bad('must not be empty');
      if (schema.maxLength !== undefined && value.length > schema.maxLength) {
        return bad(`must be at most ${schema.maxLength} characters`);
      }
      if (schema.enum && !schema.enum.includes(value)) {
        return bad(
          `must be one of ${schema.enum.map((e) => JSON.stringify(e)).join(', ')}, got ${JSON.stringify(value)}`,
        );
      }
      if (schema.pattern && !schema.pattern.re.test(value)) {
        return bad(`must be ${schema.pattern.what}, got ${JSON.stringify(value)}`);
      }
      return undefined;
    }
    case 'integer':
      if (typeof value !== 'number' || !Number.isInteger(value) || value < schema.min || value > schema.max) {
        return bad(`must be a whole number from ${schema.min} to ${schema.max}, got ${JSON.stringify(value)}`);
      }
      return undefined;
    case 'number': {
      const low = schema.exclusiveMin ? `above ${schema.min}` : `from ${schema.min}`;
      if (
        typeof value !== 'number' ||
        !Number.isFinite(value) ||
        value < schema.min ||
        (schema.exclusiveMin === true && value === schema.min) ||
        value > schema.max
      ) {
        return bad(`must be a number ${low} to ${schema.max}, got ${JSON.stringify(value)}`);
      }
      return undefined;
    }
    case 'boolean':
      return typeof value === 'boolean' ? undefined : bad(`must be true or false, got ${kind(value)}`);
    case 'array': {
      if (!Array.isArray(value)) return bad(`must be an array, got ${kind(value)}`);
      if (schema.minItems !== undefined && value.length < schema.minItems) {
        return bad(`must have at least ${schema.minItems} entr${schema.minItems === 1 ? 'y' : 'ies'}`);
      }
      if (schema.maxItems !== undefined && value.length > schema.maxItems) {
        return bad(`must have at most ${schema.maxItems} entries`);
      }
      for (let i = 0; i < value.length; i++) {
        const p = firstProblem(schema.items, value[i], `${path}[${i}]`);
        if (p) return p;
      }
      return undefined;
    }
    case 'object': {
      if (typeof value !== 'object' || value === null || Array.isArray(value)) {
        return bad(`must be a JSON object, got ${kind(value)}`);
      }
      const o = value as Record<string, unknown>;
      for (const key of Object.keys(o)) {
        if (!Object.hasOwn(schema.properties, key)) {
          const known = Object.keys(schema.properties).join(', ');
          return { path: join(path, key), message: `is not a known key (known: ${known})` };
        }
      }
      for (const key of schema.required ?? []) {
        if (o[key] === undefined) return { path: join(path, key), message: 'is required' };
      }
      for (const [key, sub] of Object.entries(schema.properties)) {
        if (o[key] === undefined) continue;
        const p = firstProblem(sub, o[key], join(path, key));
        if (p) return p;
      }
      return undefined;
    }
  }
}
