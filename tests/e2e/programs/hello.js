const l = require('fs').readFileSync(0, 'utf8').trim(); console.log('hello ' + l);
